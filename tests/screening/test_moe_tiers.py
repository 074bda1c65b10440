"""The tiers for fused MoE on CPU: the schedule of units over a chosen set of GPUs (compiles queued by when a GPU
needs them, a unit started once its compiles are ahead), the finalists with a source knob's, and
benchmarks/gpu/moe_tiers.sh with simulated GPUs (a GPU subset, records as they come, a resumed run that neither
screens nor judges again what the first did, every planned unit delivered). The budget model: test_moe_budget.py."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from astra_sglang.optimize.tuner.graph_timing import fitted_launches
from astra_sglang.optimize.tuner.moe_two_tier import finalists_by_bucket
from astra_sglang.optimize.tuner.screen_schedule import Schedule, ScreenUnit
from astra_sglang.optimize.tuner.two_tier import BucketScreen
from astra_sglang.triton.moe.knobs import SplitK, Variant
from astra_sglang.triton.moe.provider import KernelSourceProvider
from astra_sglang.triton.moe.space import MoeConfig
from astra_sglang.triton.screen_records import Screened, ScreenStats

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("call_us, calls", [(50.0, 10), (300.0, 10), (700.0, 5), (3000.0, 1), (9000.0, 1)])
def test_a_timed_graph_holds_about_a_replay_of_calls(call_us, calls):
    assert fitted_launches(call_us) == calls


class FakePool:
    """A pool that answers at once, each result with the GPU it ran on; records what it was asked."""

    def __init__(self, us: dict[str, float]):
        self.us, self.calls, self.lock = us, [], threading.Lock()

    def record(self, bucket, configs, only=None):
        return {c: [] for c in configs}

    def submit(self, found, configs, priority=(0, 0)):
        return {c: [] for c in configs}

    def screen(self, bucket, configs, deadline=None, on_result=None, only=None, found=None, priority=(0, 0)):
        with self.lock:
            self.calls.append((bucket, tuple(configs), only[0]))
        results = [Screened(config=c, bucket=bucket, stage="done", us=self.us.get(c, 100.0), worker=f"gpu{only[0]}")
                   for c in configs]
        for r in results:
            on_result(r)
        return results, ScreenStats.of(bucket, configs, results, gpus=list(only), wall_s=0.01)


def test_the_schedule_runs_units_one_per_gpu_of_those_given():
    pool = FakePool({"a": 50.0})
    seen, ended = [], []
    schedule = Schedule({"op": pool}, ["2", "3"], echo=lambda _: None,
                        on_result=lambda unit, r: seen.append((unit, r.worker)), on_unit=ended.append)
    units = [ScreenUnit("op@1", "op", 1, ["a", "b"]), ScreenUnit("op@2", "op", 2, ["a", "c"]),
             ScreenUnit("op@1+knob", "op", 1, lambda results: [r.config + "+k" for r in results if r.us < 80],
                        after="op@1"),
             ScreenUnit("op@3", "op", 3, [])]
    schedule.prefetch(units[:2])
    done = schedule.run(units)
    assert set(done) == {"op@1", "op@2", "op@1+knob", "op@3"}
    assert done["op@1+knob"].configs == ["a+k"]  # chosen from its plain unit's results
    assert {gpu for *_, gpu in pool.calls} <= {"2", "3"} and {w for _, w in seen} <= {"gpu2", "gpu3"}
    assert len(pool.calls) == 3  # nothing left at op@3: no worker asked
    assert {r.unit.name for r in ended} == set(done)


def test_a_past_deadline_starts_no_unit():
    pool = FakePool({})
    done = Schedule({"op": pool}, ["0"], deadline=0.0, echo=lambda _: None).run([ScreenUnit("op@1", "op", 1, ["a"])])
    assert done == {} and pool.calls == []


def _bucket(times: dict[str, float]) -> BucketScreen:
    results = [Screened(config=c, bucket=1, stage="done", us=us) for c, us in times.items()]
    return BucketScreen(results=results, stats=ScreenStats.of(1, list(times), results, gpus=["gpu0"], wall_s=1.0))


def test_finalists_take_plain_configs_as_fast_as_the_pick_then_the_knobs_fastest():
    pick, a, b = MoeConfig(16, 64, 64, 1, 4, 3), MoeConfig(16, 128, 64, 1, 4, 3), MoeConfig(32, 64, 64, 1, 4, 3)
    knob = KernelSourceProvider("splitk")
    split = Variant(a, SplitK(1, 2)).screen_code("splitk")
    plain = _bucket({pick.code(): 100.0, a.code(): 95.0, b.code(): 130.0})
    knobs = _bucket({split: 120.0})  # slower than the pick: still a finalist, its figure is the strict tier's
    out = finalists_by_bucket({1: plain}, {1: pick.code()}, 2, knob, lambda _: None, {1: knobs}, 1)
    assert out[1] == [Variant(a), Variant(a, SplitK(1, 2))]
    assert finalists_by_bucket({1: plain}, {1: pick.code()}, 2, echo=lambda _: None)[1] == [a]


def _tiers(tmp_path: Path, out: str, **env) -> tuple[Path, str]:
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path]), "SIMULATE": "1",
               "ASTRA_SGLANG_CACHE": str(tmp_path / "cache"), "ASTRA_COMMIT": "c0ffee1", "WORK": str(tmp_path / "work"),
               "SHAPES": "qwen3", "KNOB": "", "DEADLINE": "300", **env}
    proc = subprocess.run(["bash", "benchmarks/gpu/moe_tiers.sh", str(tmp_path / out)], cwd=ROOT, env=environ,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return tmp_path / out, proc.stdout


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_command_on_a_gpu_subset_then_resumed(tmp_path):
    first, text = _tiers(tmp_path, "a", GPUS="2,3", EXTRA="1,64")
    plan = json.loads((first / "plan.json").read_text())
    assert plan["gpus"] == ["2", "3"] and sorted(plan["units"]) == ["qwen3@1", "qwen3@64"]
    rows = _jsonl(first / "screen" / "qwen3@64.jsonl")
    assert len(rows) > 1000 and {r["worker"] for r in rows} <= {"gpu2", "gpu3"}
    verdicts = {v["tokens"]: v for v in _jsonl(first / "verdicts.jsonl")}
    assert set(verdicts) == {1, 64} and all(v["screened"] == len(_jsonl(first / "screen" / f"qwen3@{t}.jsonl"))
                                            for t, v in verdicts.items())
    assert "| qwen3 | 64 |" in text and "screened / space" in text and "(memory): " in text
    units = {u["name"]: u for u in _jsonl(first / "units.jsonl")}
    assert set(units) == set(plan["units"]) and all(u["complete"] for u in units.values())  # every unit planned
    assert all(u["specializations"] == 2 * u["configs"] == u["new_specializations"] for u in units.values())
    specs = {r["unit"]: r for r in _jsonl(first / "specializations.jsonl")}
    assert specs["qwen3@1"]["config"] == specs["qwen3@64"]["config"]  # one config, side by side at each batch size
    # the resumed call: the folder given back; only the new batch size is screened and judged
    second, text = _tiers(tmp_path, "b", GPUS="2,3", EXTRA="1,16,64", RUNS=str(first))
    plan = json.loads((second / "plan.json").read_text())
    assert plan["units"] == ["qwen3@16"]
    assert len(_jsonl(second / "screen" / "qwen3@64.jsonl")) == len(rows)  # copied over, not screened again
    again = _jsonl(second / "verdicts.jsonl")
    assert sorted(v["tokens"] for v in again) == [1, 16, 64]  # each judged once
    assert {d.name for d in (second / "strict").iterdir()} <= {"qwen3-16"}
    assert "| qwen3 | 16 |" in text and "left untuned" not in text


def test_a_short_deadline_defers_batch_sizes_and_says_so(tmp_path):
    out, text = _tiers(tmp_path, "a", EXTRA="all", DEADLINE="150")
    plan = json.loads((out / "plan.json").read_text())
    assert plan["deferred"] and "deferred: the budget model did not fit" in text
    assert "left untuned" in text and "a resumed run continues it" in text
    assert plan["units"] and sorted(u["name"] for u in _jsonl(out / "units.jsonl") if u["complete"]) == \
        sorted(plan["units"])  # what it plans, it delivers
    # the written file still covers every batch size planned: a deferred one keeps SGLang's pick, and says why
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from moe_tiers_export import export
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    ours = json.loads(export(out, "qwen3", tmp_path / "bar")[1].read_text())
    picks = plan["picks"]["qwen3"]
    assert sorted(ours) == sorted(picks)
    lines = (tmp_path / "bar" / "ours.md").read_text()
    for name in plan["deferred"]:
        tokens = name.partition("@")[2]
        assert ours[tokens] == MoeConfig.from_code(picks[tokens]["config"]).sglang()
        assert f"| {tokens} | `{picks[tokens]['config']}` | SGLang's pick, left untuned (deferred" in lines


def test_the_gpu_runs_setting_plans_only_what_its_estimate_screens_whole(torchvision_shim, monkeypatch):
    """RUN_B (moe_costs.py): one H200, 36 compile processes, Qwen3 and Mixtral, BUCKETS=16,64 tried first, 420 s.
    The old model planned 6 units (the 4 batch sizes and 2 knob units) and the run screened one; now a unit
    joins only where the whole run's estimate, its strict tier included, ends within the deadline's slack, and
    every unit planned is screened whole in it, SGLang's pick farthest from its floor first."""
    from astra_sglang.optimize.tuner.moe_budget import Strict
    from astra_sglang.optimize.tuner.moe_costs import Costs
    from astra_sglang.optimize.tuner.moe_run import Facts
    from astra_sglang.optimize.tuner.moe_tiers_plan import make_plan, shape_plan
    from astra_sglang.triton.moe import configs as moe_configs
    from astra_sglang.triton.moe.shapes import MoeShape

    lookup = moe_configs.sglang_module()
    monkeypatch.setattr(lookup, "get_device_name", lambda: "NVIDIA H200")
    lookup.get_moe_configs.cache_clear()
    facts = Facts(gpu="NVIDIA H200", smem=232448, triton="3.6.0", sglang="0.5.17", source_hash="0" * 64)
    knob = KernelSourceProvider("splitk")
    shapes = {"qwen3": MoeShape(128, 768, 2048, 8), "mixtral": MoeShape(8, 14336, 4096, 2)}
    plans = {}
    for name, shape in shapes.items():
        picks = {p.tokens: p for p in moe_configs.sglang_picks(shape.experts, shape.inter, shape.hidden, shape.topk,
                                                               moe_configs.BATCH_SIZES)}
        plans[name] = shape_plan(name, shape, picks, facts.gpu, facts.smem, facts, None, knob, list(picks))
    lookup.get_moe_configs.cache_clear()
    extra = [t for t in moe_configs.BATCH_SIZES if t not in (16, 64)]
    plan = make_plan(plans, [16, 64], extra, facts, 1, 36, 420.0, knob, strict=Strict(2, 1))
    line = plan.fit.timeline
    assert 0 < len(plan.units) < 6 and line.end_s <= 420.0 * (1 - Costs().slack)
    assert all(p.screened == p.unit.configs for p in line.placed)
    gaps = [u.gap for u in plan.fit.chosen if not u.knob]
    assert gaps == sorted(gaps, reverse=True)
    assert all(u.lead >= 1 for u in plan.units if isinstance(u.configs, list))


def test_plan_only_tells_what_a_call_would_screen_without_a_gpu(tmp_path, torchvision_shim):
    paths = [str(ROOT), *([str(torchvision_shim)] if torchvision_shim else []), *sys.path]
    proc = subprocess.run([sys.executable, "benchmarks/moe_tiers_bench.py", "--out", str(tmp_path / "p"),
                           "--plan-only", "NVIDIA H200", "--gpus", "0,1", "--cores", "18", "--deadline", "480",
                           "--buckets", ""], cwd=ROOT, env={**os.environ, "PYTHONPATH": os.pathsep.join(paths)},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    plan = json.loads((tmp_path / "p" / "plan.json").read_text())
    assert plan["units"] and [p["unit"] for p in plan["placed"]] and plan["estimate_s"]["end"] <= 480.0
    assert all(f"{u}: GPU " in proc.stdout for u in plan["units"]) and not list((tmp_path / "p" / "screen").glob("*"))


def test_an_fp8_shape_is_screened_without_the_knob_judged_by_the_fp8_spec_and_written_as_an_fp8_file(tmp_path):
    out, text = _tiers(tmp_path, "a", SHAPES="mixtral-8x7b-tp2-fp8", EXTRA="1", KNOB="splitk")
    plan = json.loads((out / "plan.json").read_text())
    assert plan["units"] == ["mixtral-8x7b-tp2-fp8@1"]  # no knob unit: its variants run unquantized shapes only
    (verdict,) = _jsonl(out / "verdicts.jsonl")
    # the simulated landscape puts SGLang's fp8 pick far from the best: a config is tuned and written
    assert verdict["verdict"] == "tuned" and "dtype=fp8_w8a8" in verdict["pick_source"]
    tune = json.loads((out / "strict" / "mixtral-8x7b-tp2-fp8-1" / "tune.json").read_text())
    assert tune["kernel"] == "fused_moe_fp8" and tune["shape"]["quant"] == "fp8_w8a8"
    unit = next(u for u in _jsonl(out / "units.jsonl") if u["name"] == "mixtral-8x7b-tp2-fp8@1")
    assert [s["wall_s"] for s in tune["screen"]] == [unit["wall_s"]] and unit["wall_s"] > 0  # its report: not 0 s
    written = tune["config_file"]  # the file SGLang reads for fp8_w8a8 only, never its bf16 one
    assert "/E=8,N=7168,device_name=" in written and written.endswith(",dtype=fp8_w8a8.json")
    from astra_sglang.patchset.manifest import PatchManifest
    from astra_sglang.patchset.store import PatchStore
    from astra_sglang.triton.moe.patch import verify_requests

    folder = out / "strict" / "mixtral-8x7b-tp2-fp8-1" / "patches" / "fused_moe"
    manifest = PatchManifest.load(folder)
    assert [c.dtype for c in manifest.configs] == ["fp8_w8a8"] and manifest.dtypes == ["bfloat16"]  # its calls'
    assert [e.op for e in PatchStore(folder.parent).entries()] == ["fused_moe"]  # loads: the spec's dtypes
    (request,) = verify_requests(folder, manifest)  # `patch verify` judges it by the fp8 spec, bf16 calls
    assert request.kernel == "fused_moe_fp8" and request.dtypes == ["bfloat16"]
    assert request.baseline.path == "py:astra_sglang.triton.moe.op_fp8:sglang_pick"
    # what the bar takes from it: the ranked configs, and ours: the strict tier's verdict
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from moe_tiers_export import export
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    ranked, ours = export(out, "mixtral-8x7b-tp2-fp8", tmp_path / "bar", top=5)
    ranked, ours = json.loads(ranked.read_text()), json.loads(ours.read_text())
    rows = [r for r in _jsonl(out / "screen" / "mixtral-8x7b-tp2-fp8@1.jsonl") if r["stage"] == "done"]
    fastest = sorted(rows, key=lambda r: r["us"])
    assert ranked == {"1": [r["config"] for r in fastest[:5]]}
    assert ours == {"1": MoeConfig.from_code(verdict["chosen"]).sglang()}
    assert f"strict tier: {verdict['verdict']}" in (tmp_path / "bar" / "ours.md").read_text()


@pytest.mark.parametrize("share, judged", [(1.0, True), (0.6, True), (0.4, False)])
def test_a_screen_the_deadline_cut_is_judged_past_half_its_order_and_says_so(tmp_path, torchvision_shim, monkeypatch,
                                                                             share, judged):
    """On an H200 (2026-11-27) Mixtral TP2 fp8 @1 screened 1,681 of its 1,709 configs before the deadline, with the
    strict tier's time still left, and was left untuned. A cut screen past JUDGE_CUT_SHARE of its order now goes to
    the strict tier (its verdict counts what the cut left); one under it is left, and the report says why."""
    from types import SimpleNamespace

    from astra_sglang.optimize.tuner import moe_tiers
    from astra_sglang.optimize.tuner.moe_costs import Costs
    from astra_sglang.optimize.tuner.moe_run import Facts
    from astra_sglang.optimize.tuner.moe_tiers_plan import shape_plan
    from astra_sglang.optimize.tuner.moe_tiers_records import Records, unit_name
    from astra_sglang.optimize.tuner.moe_tiers_report import bucket_lines
    from astra_sglang.triton.moe import configs as moe_configs
    from astra_sglang.triton.moe.shapes import MoeShape

    lookup = moe_configs.sglang_module()
    monkeypatch.setattr(lookup, "get_device_name", lambda: "NVIDIA H200")
    lookup.get_moe_configs.cache_clear()
    facts = Facts(gpu="NVIDIA H200", smem=232448, triton="3.6.0", sglang="0.5.17", source_hash="0" * 64)
    shape = MoeShape(128, 768, 2048, 8)
    picks = {p.tokens: p for p in moe_configs.sglang_picks(128, 768, 2048, 8, [64])}
    lookup.get_moe_configs.cache_clear()
    sp = shape_plan("qwen3", shape, picks, facts.gpu, facts.smem, facts, None, None, [])
    codes, pick = sp.orders[64].codes, picks[64].config.code()
    held = [pick] + [c for c in codes if c != pick][:round(share * len(codes)) - 1]
    records = Records(tmp_path)
    for i, code in enumerate(held):  # SGLang's pick 100 us, the second config held 2% faster, the rest slower
        us = 100.0 if code == pick else 98.0 if i == 1 else 110.0 + i
        records.screened(unit_name("qwen3", 64), Screened(config=code, bucket=64, stage="done", us=us, replays=10))
    given = {}
    monkeypatch.setattr(moe_tiers, "_judge_shape",
                        lambda setup, recs, deadline, echo, name, sp_, judged_, *rest: given.update(judged_))
    setup = SimpleNamespace(finalists=2, knob_finalists=0, gpus=["0"], costs=Costs())
    moe_tiers.judge(setup, {"qwen3": sp}, records, None, time.time() + 600, echo=lambda text: None)
    if judged:
        assert [c.code() for c in given[64]] == [held[1]]  # the fastest screened, to the strict tier
        row = moe_tiers._row(sp, 64, BucketScreen.of(64, records.known(unit_name("qwen3", 64)), codes), None,
                             [held[1]], "tuned", held[1])
        assert row.cut == len(codes) - len(held) and row.screened == len(held)
        records.verdict(row)
        (line,) = bucket_lines({"qwen3": sp}, records, [64], set(), facts.gpu)
        assert ("judged on a screen cut by the deadline" in line.why) == (share < 1)
    else:
        assert not given
        (line,) = bucket_lines({"qwen3": sp}, records, [64], set(), facts.gpu)
        assert line.verdict == "left" and "the strict tier judges a cut screen from 50% of them" in line.why
