"""The bar's CPU-side parts: which evaluations compare what, the rows and the final round drawn from their results,
the summary and bar.md, and the GPU script's orchestration with its GPU stages stood in for."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from moe_standins import timed_row

from astra_sglang.harness.records import EvalResult
from astra_sglang.triton.moe import bar
from astra_sglang.triton.moe.bar_report import summarize, write_report
from astra_sglang.triton.moe.configs import Pick
from astra_sglang.triton.moe.knobs import Variant
from astra_sglang.triton.moe.op import parse_table
from astra_sglang.triton.moe.sglang_tuner_records import TunerBatch, TunerRun
from astra_sglang.triton.moe.source_op import parse
from astra_sglang.triton.moe.space import MoeConfig

SHAPE = bar.PRESETS["mixtral-8x7b-tp2"]
BEST = {1: MoeConfig(16, 64, 128, 1, 4, 4), 64: MoeConfig(16, 128, 64, 1, 8, 3), 1024: MoeConfig(64, 128, 64, 16, 8, 3)}


def result_for(comparison, speedups: dict[int, float]) -> EvalResult:
    out = EvalResult(kernel="fused_moe", candidate=comparison.request.candidate.name(), ok=True, stage="done")
    for shape in comparison.request.shapes:
        out.shapes.append(timed_row(shape, speedups.get(shape[0], 1.0), baseline_us=50.0))
    return out


def test_the_first_round_compares_against_the_tuners_best():
    ours = {1: MoeConfig(16, 32, 256, 1, 4, 5), 4096: MoeConfig(128, 128, 64, 16, 8, 3)}
    comparisons = bar.requests(SHAPE, BEST, ours)
    names = [c.name for c in comparisons]
    assert names[0] == "tuner-vs-pick" and names[-1] == "ours-vs-tuner" and "splitk-1" in names
    first = comparisons[0].request
    assert parse_table(first.candidate.path.rsplit(":", 1)[1]) == BEST and first.baseline.path.endswith("sglang_pick")
    split = comparisons[1].request
    _, table = parse(split.candidate.path.rsplit(":", 1)[1])
    assert set(table) == {1} and table[1].config == BEST[1] and table[1].split.down > 1  # only batch 1 has few blocks
    assert parse_table(split.baseline.path.rsplit(":", 1)[1]) == {1: BEST[1]}
    assert [s[0] for s in split.shapes] == [1] and not split.edge_cases
    assert comparisons[-1].variants == {t: ours[1].code() for t in BEST}  # SGLang's nearest key: 1 for 1024 too


def test_the_splits_that_won_are_timed_again():
    comparisons = bar.requests(SHAPE, BEST)
    splits = [c for c in comparisons if c.name.startswith("splitk-")]
    results = [result_for(c, {1: 1.08 if c.name == "splitk-2" else 0.97}) for c in comparisons]
    first = bar.rows(SHAPE, BEST, comparisons, results)
    assert {r.comparison for r in first} == {"tuner-vs-pick", *(c.name for c in splits)}
    final = bar.final_request(SHAPE, BEST, first)
    assert final.name == "splitk-final" and final.variants == {1: splits[1].variants[1]}
    lost = [r.model_copy(update={"speedup": 0.9}) for r in first]
    assert bar.final_request(SHAPE, BEST, lost) is None


def _tuner() -> TunerRun:
    batches = [TunerBatch(tokens=t, mode="bounded", space=1920, given=30, ranked=6, costs=[1.0] * 6 + [1.5, 2.5] * 12,
                          seconds=50.0, best=BEST[t].sglang()) for t in sorted(BEST)]
    return TunerRun(files={"tuning_fused_moe_triton.py": "ab" * 8, "common_utils.py": "cd" * 8}, mode="bounded",
                    batches=batches, wall_s=120.0, gpus=["0", "1"], sample=24, seed=0)


def test_the_summary_and_the_report(tmp_path):
    comparisons = bar.requests(SHAPE, BEST)
    results = [result_for(c, {1: 1.1, 64: 1.05} if c.name == "tuner-vs-pick" else {1: 1.04}) for c in comparisons]
    found = bar.rows(SHAPE, BEST, comparisons, results)
    final = bar.final_request(SHAPE, BEST, found)
    found += bar.rows(SHAPE, BEST, [final], [result_for(final, {1: 1.02})])
    picks = {t: Pick(t, MoeConfig(64, 64, 32, 8), "default") for t in BEST}
    summary = summarize(picks, _tuner(), found)
    one = summary[0]
    assert one.tuner_vs_pick == pytest.approx(1.1) and one.splitk_confirmed and one.splitk_vs_tuner == pytest.approx(1.02)
    assert Variant.from_code(one.splitk).config == BEST[1]
    assert summary[2].splitk_note.startswith("no split worth trying")
    assert one.estimate_s == pytest.approx(2.0 * 1920) and one.mean_config_s == pytest.approx(1.8)
    header = {"date": "2026-11-28", "gpu": "NVIDIA H100 80GB HBM3", "commit": "abc1234", "sglang": "0.5.17",
              "triton": "3.6.0", "shape": SHAPE.describe(), "command": "python3 benchmarks/moe_sglang_bar.py"}
    text = write_report(tmp_path / "bar.md", header, summary, _tuner()).read_text()
    assert "| 1 | `m64n64k32g8wdsd` (SGLang's default config" in text and "1.100x" in text and "1.020x" in text
    assert "64.0 +- " in text and "own tune loop over our ranked configs first, then 24 drawn at random" in text
    assert "over these 3 batch sizes on 2 GPU(s): 128 min (estimated)" in text


def _stand_in_gpu_stages(script, monkeypatch) -> dict:
    """The tuner folder's check, the header's GPU facts and SGLang's picks (the default config everywhere) stood in
    for; returns where the picks' dtype is recorded."""
    monkeypatch.setattr(script.TunerScript, "open", classmethod(lambda cls, f: cls(f, {}, True)))
    monkeypatch.setattr(script, "header", lambda args, shape, gpus: {"kind": "header", "date": "d", "gpu": "G",
                                                                      "commit": "c", "sglang": "0.5.17", "triton": "3.6.0",
                                                                      "shape": shape.describe(), "command": "cmd"})
    seen = {}

    def picks(e, n, h, k, sizes, dtype=None):
        seen.update(dtype=dtype)
        return [Pick(t, MoeConfig(64, 64, 32, 8), "default") for t in sizes]

    monkeypatch.setattr(script.moe_configs, "sglang_picks", picks)
    return seen


def test_the_gpu_script_end_to_end_with_its_gpu_stages_stood_in_for(bench_script, tmp_path, monkeypatch):
    script = bench_script("moe_sglang_bar")
    folder = tmp_path / "fused_moe_triton"
    folder.mkdir()
    seen = _stand_in_gpu_stages(script, monkeypatch)

    def bounded(tuner_script, shape, tokens, gpus, work, ranked, sample, seed, seconds, compare=None, cache_root=None):
        seen.update(tokens=tokens, gpus=gpus, ranked=ranked, sample=sample, seconds=seconds, compare=compare,
                    shape=shape, cache_root=cache_root)
        run = _tuner()
        return run.model_copy(update={"batches": [b for b in run.batches if b.tokens in tokens]})

    monkeypatch.setattr(script, "run_bounded", bounded)
    monkeypatch.setattr(script, "evaluate", lambda gpus, comparisons: [result_for(c, {1: 1.05}) for c in comparisons])
    ranked = tmp_path / "ranked.json"
    ranked.write_text(json.dumps({"1": ["m16n64k128g1w4s4"], "64": ["m16n128k64g1w8s3", "m32n64k64g1w4s3"]}))
    ours = tmp_path / "ours.json"
    ours.write_text(json.dumps({"1": MoeConfig(16, 64, 128, 1, 4, 4).sglang(), "48": MoeConfig(32, 64, 64, 1, 4, 3).sglang()}))
    report = script.main(["--tuner-dir", str(folder), "--out", str(tmp_path / "out"), "--batch-sizes", "1,64",
                          "--gpus", "0,1", "--ranked", str(ranked), "--deadline", "400", "--ours", str(ours)])
    assert seen["tokens"] == [1, 64] and seen["gpus"] == ["0", "1"] and 170 < seen["seconds"] <= 180
    assert seen["compare"][64] == {"pick": MoeConfig(64, 64, 32, 8).sglang(), "ours": MoeConfig(32, 64, 64, 1, 4, 3).sglang()}
    assert seen["dtype"] is None and seen["shape"] == bar.PRESETS["mixtral-8x7b-tp2"]
    assert seen["ranked"][64] == [MoeConfig(16, 128, 64, 1, 8, 3).sglang(), MoeConfig(32, 64, 64, 1, 4, 3).sglang()]
    lines = [json.loads(x) for x in (tmp_path / "out" / "bar.jsonl").read_text().splitlines()]
    assert [x["kind"] for x in lines][:3] == ["header", "tuner", "tuner"]
    assert {x["comparison"] for x in lines if x["kind"] == "comparison"} >= {"tuner-vs-pick", "splitk-1", "splitk-final"}
    assert report.is_file() and (tmp_path / "out" / "tuner.json").is_file()
    assert not str(seen["cache_root"]).startswith(str(tmp_path / "out"))  # Triton caches kept out of the results


def test_the_gpu_script_runs_the_exhaustive_tuner_and_judges_its_best(bench_script, tmp_path, monkeypatch):
    script = bench_script("moe_sglang_bar")
    seen = _stand_in_gpu_stages(script, monkeypatch)

    def exhaustive(tuner_script, shape, tokens, gpus, work, seconds, warm_procs, warm_share, cold_sample,
                   cold_seconds, seed, compare, cache_root):
        seen.update(tokens=tokens, seconds=seconds, warm_procs=warm_procs, warm_share=warm_share,
                    cold=(cold_sample, cold_seconds), compare=compare, cache_root=cache_root)
        batches = [TunerBatch(tokens=t, mode="exhaustive", space=1920, given=1920, costs=[0.1] * 1920, seconds=192.0,
                              best=BEST[t].sglang(), warmed=1920, warm_s=140.0, cold_costs=[1.0, 2.0])
                   for t in tokens]
        return TunerRun(files={}, mode="exhaustive", batches=batches, wall_s=340.0, gpus=gpus, sample=cold_sample,
                        warm_s=145.0, timing_s=195.0, cold_s=30.0, warm_procs=warm_procs)

    monkeypatch.setattr(script, "run_exhaustive", exhaustive)
    monkeypatch.setattr(script, "default_warm_procs", lambda shape, gpus: 16)
    monkeypatch.setattr(script, "run_bounded", lambda *a, **k: pytest.fail("exhaustive runs no bounded loop"))
    judged = []

    def evaluate(gpus, comparisons):
        judged.extend(comparisons)
        return [result_for(c, {1: 1.05}) for c in comparisons]

    monkeypatch.setattr(script, "evaluate", evaluate)
    report = script.main(["--tuner-dir", str(tmp_path), "--out", str(tmp_path / "out"), "--batch-sizes", "1,64",
                          "--gpus", "0,1", "--mode", "exhaustive", "--deadline", "470", "--tuner-share", "0.8",
                          "--work", str(tmp_path / "work")]).read_text()
    assert seen["tokens"] == [1, 64] and 370 < seen["seconds"] <= 376 and seen["warm_procs"] == 16
    assert seen["warm_share"] == 0.5 and seen["cold"] == (8, 60.0) and seen["cache_root"] == tmp_path / "work"
    assert seen["compare"][1] == {"pick": MoeConfig(64, 64, 32, 8).sglang()}
    first = judged[0].request
    assert parse_table(first.candidate.path.rsplit(":", 1)[1]) == {1: BEST[1], 64: BEST[64]}
    assert "exhaustive: its own tune loop over its whole space" in " ".join(report.split())


def test_the_cold_mode_samples_its_users_wall_and_evaluates_nothing(bench_script, tmp_path, monkeypatch):
    """--mode cold: the cold sample alone, at most its seconds and the tuner's share; no best, so nothing judged;
    the report gives each batch size's users' sweep."""
    script = bench_script("moe_sglang_bar")
    seen = _stand_in_gpu_stages(script, monkeypatch)

    def cold(tuner_script, shape, tokens, gpus, work, count, seed, seconds, cache_root):
        seen.update(tokens=tokens, count=count, seconds=seconds)
        costs = [9.0] + [1.0, 1.2, 0.8] * 10
        return TunerRun(files={}, mode="cold", batches=[TunerBatch(tokens=t, mode="cold", space=1920, cold_costs=costs)
                                                         for t in tokens], wall_s=0.0, gpus=gpus, sample=count,
                        cold_s=70.0)

    monkeypatch.setattr(script, "run_cold", cold)
    for other in ("run_bounded", "run_exhaustive", "run_full"):
        monkeypatch.setattr(script, other, lambda *a, **k: pytest.fail("cold runs no tune loop"))
    monkeypatch.setattr(script, "evaluate", lambda gpus, comparisons: pytest.fail("cold judges nothing"))
    report = script.main(["--tuner-dir", str(tmp_path), "--out", str(tmp_path / "out"), "--batch-sizes", "1,64",
                          "--gpus", "0,1", "--mode", "cold", "--cold-sample", "40", "--cold-seconds", "90",
                          "--deadline", "300"]).read_text()
    assert seen["tokens"] == [1, 64] and seen["count"] == 40 and seen["seconds"] == 90.0
    text = " ".join(report.split())
    assert "cold: a sample of its space alone" in text
    minutes = (9.0 + 1.0 * 1919) / 60
    assert f"| 1 | 1920 | 31 | 9.0 | 1.00 | {minutes:.1f} +- " in report
    assert f"on 2 GPU(s) (the script dealing them round-robin over one worker per GPU): {minutes:.0f} min" in text


def test_ours_is_judged_against_an_earlier_runs_best_without_running_sglangs_tuner(bench_script, tmp_path,
                                                                                    monkeypatch):
    """--tuner-from the committed H200 Qwen3 runs: no tuner runs, its best per batch size is the one committed,
    ours is judged against it, and the report says where the tuner's figures come from."""
    script = bench_script("moe_sglang_bar")
    _stand_in_gpu_stages(script, monkeypatch)
    monkeypatch.setattr(script, "header", lambda args, shape, gpus: {
        "kind": "header", "date": "d", "gpu": "NVIDIA H200", "commit": "c", "sglang": "0.5.17", "triton": "3.6.0",
        "shape": shape.describe(), "command": "cmd"})
    for runner in ("run_bounded", "run_exhaustive", "run_full"):
        monkeypatch.setattr(script, runner, lambda *a, **k: pytest.fail("SGLang's tuner is not run again"))
    monkeypatch.setattr(script.TunerScript, "open", classmethod(lambda cls, f: pytest.fail("no tuner folder read")))
    judged = []

    def evaluate(gpus, comparisons):
        judged.extend(comparisons)
        return [result_for(c, {1: 1.0, 64: 1.0}) for c in comparisons]

    monkeypatch.setattr(script, "evaluate", evaluate)
    runs = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "2026-11-27-h200" / "moe-bar"
    ours = tmp_path / "ours.json"
    ours.write_text(json.dumps({"1": MoeConfig(16, 64, 64, 1, 4, 5).sglang(), "64": MoeConfig(16, 256, 128, 1, 8, 2).sglang()}))
    report = script.main(["--tuner-from", str(runs / "qwen3-30b-a3b-1-64"), "--tuner-from",
                          str(runs / "qwen3-30b-a3b-64"), "--preset", "qwen3-30b-a3b", "--out", str(tmp_path / "out"),
                          "--batch-sizes", "1,64", "--gpus", "0,1", "--ours", str(ours)]).read_text()
    ours_vs_tuner = next(c for c in judged if c.name == "ours-vs-tuner")
    tuner_best = {1: MoeConfig.from_code("m16n32k64g1w4s5"), 64: MoeConfig.from_code("m16n128k128g1w8s2")}
    assert parse_table(ours_vs_tuner.request.baseline.path.rsplit(":", 1)[1]) == tuner_best  # the committed bests
    tuner = json.loads((tmp_path / "out" / "tuner.json").read_text())
    assert [len(b["costs"]) for b in tuner["batches"]] == [1920, 1920]
    assert "SGLang's tuner was not run here" in " ".join(report.split())
    assert "qwen3-30b-a3b-64 (2026-11-27, commit d5b82c5)" in " ".join(report.split())
    # the script's own timing of ours needs its process: the empty column says why
    assert "Ours has no figure the script's way here: SGLang's script did not run in this command" in \
        " ".join(report.split())


def test_an_fp8_preset_runs_the_tuner_fp8_and_is_judged_by_the_fp8_spec_without_split_k(bench_script, tmp_path,
                                                                                       monkeypatch):
    script = bench_script("moe_sglang_bar")
    seen = _stand_in_gpu_stages(script, monkeypatch)

    def bounded(tuner_script, shape, tokens, gpus, work, ranked, sample, seed, seconds, compare=None, cache_root=None):
        seen.update(shape=shape)
        run = _tuner()
        batches = [b.model_copy(update={"timed": {"pick": 20.0, "tuner": 16.0}}) for b in run.batches if b.tokens == 1]
        return run.model_copy(update={"batches": batches})

    judged = []

    def evaluate(gpus, comparisons):
        judged.extend(comparisons)
        return [result_for(c, {1: 1.05}) for c in comparisons]

    monkeypatch.setattr(script, "run_bounded", bounded)
    monkeypatch.setattr(script, "evaluate", evaluate)
    ours = tmp_path / "ours.json"
    ours.write_text(json.dumps({"1": MoeConfig(16, 64, 128, 1, 4, 3).sglang()}))
    report = script.main(["--tuner-dir", str(tmp_path), "--out", str(tmp_path / "out"), "--batch-sizes", "1",
                          "--gpus", "0", "--preset", "mixtral-8x7b-tp2-fp8", "--ours", str(ours)]).read_text()
    assert seen["dtype"] == "fp8_w8a8" and seen["shape"].quant == "fp8_w8a8" and seen["shape"].inter == 7168
    assert "| 1 | 20.00 | 16.00 | - | - | - |" in report
    # the fp8 spec and ops judge it: the tuner's best against SGLang's pick, ours against it; no split-K
    assert [c.name for c in judged] == ["tuner-vs-pick", "ours-vs-tuner"]
    assert all(c.request.kernel == "fused_moe_fp8" for c in judged)
    assert all(side.path.startswith("py:astra_sglang.triton.moe.op_fp8:")
               for c in judged for side in (c.request.candidate, c.request.baseline))
    assert "fp8_w8a8: judged by the evaluator's fused_moe_fp8 spec" in " ".join(report.split())
