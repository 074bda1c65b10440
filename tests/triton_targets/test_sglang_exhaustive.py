"""SGLang's tuner over its whole space (sglang_tuner_exhaustive), on CPU against the stand-in tuner folder: the warm
phase's shards, the timing phase's space, the one Triton cache they share, a config failing in both, the deadline
cut, and how the report words it all."""
from __future__ import annotations

import json
import re
import time
from collections import Counter
from pathlib import Path

import pytest
from sglang_tuner_standin import standin_us, tuner_folder

from astra_sglang.triton.moe.bar_report import summarize, write_report
from astra_sglang.triton.moe.configs import Pick
from astra_sglang.triton.moe.sglang_tuner import TunerScript, key, model_dir
from astra_sglang.triton.moe.sglang_tuner_child import shard_of
from astra_sglang.triton.moe.sglang_tuner_exhaustive import default_warm_procs, run_cold, run_exhaustive, warm
from astra_sglang.triton.moe.sglang_tuner_landscape import smem_check
from astra_sglang.triton.moe.sglang_tuner_records import TunerBatch, TunerRun
from astra_sglang.triton.moe.shapes import MoeShape
from astra_sglang.triton.moe.space import MoeConfig

SHAPE = MoeShape(8, 96, 32, 2)
"""hidden 32: the stand-in's configs with BLOCK_SIZE_K 128 (9 of its 18) fail as a config that does not compile."""
SPACE = 18


def calls(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_every_config_is_warmed_once_per_batch_size_then_timed_whole_on_the_same_cache(tmp_path, monkeypatch):
    log = tmp_path / "calls.jsonl"
    monkeypatch.setenv("STANDIN_CALLS", str(log))
    script = TunerScript.open(tuner_folder(tmp_path, sleep=0.01))
    run = run_exhaustive(script, SHAPE, [1, 64, 256], ["0", "1"], tmp_path / "work", seconds=120, warm_procs=2,
                         cold_sample=3, cold_seconds=60, cache_root=tmp_path / "caches")
    seen = calls(log)
    warm_cache = {c["cache"] for c in seen if "triton-warm-" in c["cache"]}
    assert len(warm_cache) == 1 and warm_cache.pop().startswith(str(tmp_path / "caches"))
    cold = [c for c in seen if "triton-cold-" in c["cache"]]
    assert Counter(c["tokens"] for c in cold) == {1: 3, 64: 3, 256: 3}
    loops = [c for c in seen if "triton-warm-" in c["cache"] and c["iters"] == 10]  # the script's tune loops
    phases = {p: [c for c in loops if c["log"].startswith(p)] for p in ("warm-", "timing-")}
    assert len(phases["warm-"]) + len(phases["timing-"]) == len(loops)
    assert [len({c["pid"] for c in phases[p]}) for p in phases] == [4, 2]  # 2 per GPU, then 1 per GPU
    for phase in phases.values():
        for tokens in (1, 64, 256):  # every config of the space exactly once per batch size, failing ones included
            got = Counter(key(c["config"]) for c in phase if c["tokens"] == tokens)
            assert len(got) == SPACE and set(got.values()) == {1}
    assert [b.tokens for b in run.batches] == [1, 64, 256] and run.mode == "exhaustive" and run.warm_procs == 2
    for batch in run.batches:
        assert (batch.space, batch.given, batch.covered, batch.warmed, batch.skipped) == (SPACE, SPACE, SPACE, SPACE, 9)
        assert batch.skip_reasons == {"RuntimeError: out of resources": 9} and len(batch.cold_costs) == 3
        assert batch.best == {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1,
                              "num_warps": 4, "num_stages": 3} and batch.timed["tuner"] == pytest.approx(10.064)
        assert batch.warm_s > 0 and batch.seconds > 0
        # its loop's landscape: the stand-in's time for each config that ran, its error for each that raised
        space = [MoeConfig(m, n, k, 1, 4, 3) for m in (16, 32, 64) for n in (32, 64, 128) for k in (64, 128)]
        times = {c.code(): standin_us(c.sglang(), SHAPE.hidden) for c in space}
        assert batch.landscape == pytest.approx({c: us for c, us in times.items() if us is not None})
        assert batch.failed == {c: "RuntimeError: out of resources" for c, us in times.items() if us is None}
        assert min(batch.landscape, key=batch.landscape.get) == MoeConfig.from_sglang(batch.best).code()
        check = smem_check(batch)  # the stand-in's failures are not Triton's shared-memory refusals
        assert (check.refused, check.wasted, check.pruned, check.gap, check.wgmma) == (0, [], [], None, False)
    assert run.wall_s == pytest.approx(run.warm_s + run.timing_s) and run.cold_s > 0
    assert run.users_wall() == pytest.approx(max(run.batches[0].estimate()[0] + run.batches[2].estimate()[0],
                                                 run.batches[1].estimate()[0]))


def test_with_fewer_batch_sizes_than_gpus_every_gpu_samples_cold_configs(tmp_path, monkeypatch):
    """One batch size on two GPUs: both draw a cold sample (their own seeds, their own empty caches), and the
    estimate gets both children's configs, the one-time costs of the second child's first config dropped."""
    log = tmp_path / "calls.jsonl"
    monkeypatch.setenv("STANDIN_CALLS", str(log))
    script = TunerScript.open(tuner_folder(tmp_path, sleep=0.01))
    run = run_exhaustive(script, SHAPE, [64], ["0", "1"], tmp_path / "work", seconds=120, warm_procs=1,
                         cold_sample=4, cold_seconds=60, cache_root=tmp_path / "caches")
    cold = [c for c in calls(log) if "triton-cold-" in c["cache"]]
    by_child = {name: [key(c["config"]) for c in cold if c["log"].startswith(name)] for name in ("cold-gpu0",
                                                                                                  "cold-gpu1")}
    assert [len(v) for v in by_child.values()] == [4, 4] and by_child["cold-gpu0"] != by_child["cold-gpu1"]
    assert len({c["cache"] for c in cold}) == 2
    (batch,) = run.batches
    assert len(batch.cold_costs) == 4 + 3 and batch.estimate() is not None


def test_a_deadline_cuts_the_timing_loop_and_says_how_far_it_got(tmp_path):
    # 2 s a config: the whole loop (36 s) cannot fit, while a timing child that takes ~10 s to start on a loaded
    # 2-core machine still reaches some configs (at 0.4 s a config and 14 s in all it reached none there)
    script = TunerScript.open(tuner_folder(tmp_path, sleep=2.0))
    run = run_exhaustive(script, MoeShape(8, 96, 64, 2), [4], ["0"], tmp_path / "work", seconds=30, warm_procs=6,
                         warm_share=0.2, cold_sample=0)
    (batch,) = run.batches
    assert batch.given == SPACE and 0 < batch.covered < SPACE and batch.best is not None
    assert batch.warmed < SPACE and not batch.cold_costs and run.users_wall() is None
    picks = {4: Pick(4, MoeConfig(64, 64, 32, 8), "default")}
    text = write_report(tmp_path / "bar.md", HEADER, summarize(picks, run, []), run).read_text()
    text = " ".join(text.split())  # the template wraps its lines
    assert f"| 4 | {SPACE} | {batch.covered} (cut by the deadline) |" in text
    assert f"at batch size 4 its loop reached {batch.covered} of its {SPACE} configs" in text
    assert "not estimated in this run (no cold sample)" in text


def test_each_batch_size_warms_in_its_own_share_of_the_time(tmp_path):
    """A warm child runs its batch sizes one after another, each until its share of the time left: with a shard
    slower than the phase, the first batch size stops at half of it and the second still warms (one deadline for
    both let the first take all of it)."""
    sleep, shape = 1.0, MoeShape(8, 96, 64, 2)  # hidden 64: every config of the stand-in's space runs, 1 s each
    script = TunerScript.open(tuner_folder(tmp_path, sleep=sleep))
    work = tmp_path / "work"
    work.mkdir()
    deadline = time.time() + 20
    shards = warm(script, shape, [1, 4], ["0"], work, model_dir(shape, work), tmp_path / "cache", procs=1,
                  deadline=deadline)
    first, second = sorted(shards, key=lambda s: s.tokens)
    assert (first.tokens, second.tokens, first.given, second.given) == (1, 4, SPACE, SPACE)
    share = (deadline - first.begin) / 2
    assert 0 < first.started < SPACE and first.end <= first.begin + share + sleep + 1.0
    assert second.begin >= first.end and 0 < second.started < SPACE and second.end <= deadline + sleep + 1.0


HEADER = {"date": "2026-11-28", "gpu": "NVIDIA H100 80GB HBM3", "commit": "abc1234", "sglang": "0.5.17",
          "triton": "3.6.0", "shape": "8x7168x4096 top-2", "command": "bash benchmarks/gpu/moe_sglang_bar.sh"}


def test_the_report_says_which_wall_is_which(tmp_path):
    best = MoeConfig(16, 64, 64, 1, 4, 3).sglang()
    batches = [TunerBatch(tokens=t, mode="exhaustive", space=1920, given=1920, costs=[0.1] * 1920, seconds=192.0,
                          best=best, skipped=416, warmed=1920, warm_s=150.0, cold_costs=[1.0, 2.0, 3.0])
               for t in (1, 64)]
    run = TunerRun(files={"tuning_fused_moe_triton.py": "ab" * 8}, mode="exhaustive", batches=batches,
                   wall_s=350.0, gpus=["0", "1"], sample=3, warm_s=155.0, timing_s=195.0, cold_s=40.0, warm_procs=16)
    picks = {t: Pick(t, MoeConfig(64, 64, 32, 8), "default") for t in (1, 64)}
    text = write_report(tmp_path / "bar.md", HEADER, summarize(picks, run, []), run).read_text()
    text = " ".join(text.split())  # the template wraps its lines
    assert "exhaustive: its own tune loop over its whole space" in text and "16 warm processes per GPU" in text
    assert "This run's wall: 350 s (warm phase 155 s, timing phase 195 s)" in text
    assert "Its users' wall (the script as they run it, cold Triton cache): 80 min, estimated" in text  # 1 + 2.5 x 1,919 s
    assert "| 1 | 1920 | 1920 (its whole space) | 416 | 192 | 1920 | 150 | 80.0 +- " in text
    assert "A tuner's wall is measured against this users' wall" in text and "The deadline cut" not in text


@pytest.mark.parametrize("size, count", [(1920, 32), (1920, 16), (18, 4), (7, 9)])
def test_warm_shards_cover_the_space_once_and_mix_its_tiles(size, count):
    space = [{"BLOCK_SIZE_N": (32, 64, 128, 256)[i // 8 % 4], "i": i} for i in range(size)]
    shards = [shard_of(space, i, count) for i in range(count)]
    assert sorted(c["i"] for s in shards for c in s) == list(range(size))
    assert max(map(len, shards)) - min(map(len, shards)) <= 1
    if size == 1920:  # in the space's own order, a stride of 32 would give every shard one BLOCK_SIZE_N
        assert all(len({c["BLOCK_SIZE_N"] for c in s}) == 4 for s in shards)


def test_warm_processes_share_the_cores_over_the_gpus(monkeypatch):
    """32 cores: 32 warm children on one GPU, 16 a GPU on two; where a child's weights would not fit in 85% of a
    GPU's memory, as many as fit."""
    import os
    import types

    import torch

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(32)), raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert (default_warm_procs(SHAPE, ["0"]), default_warm_procs(SHAPE, ["0", "1"])) == (32, 16)
    from astra_sglang.triton.moe import sglang_tuner_exhaustive as ex

    per_child = SHAPE.experts * 3 * SHAPE.inter * SHAPE.hidden * 2 + ex.PROC_OVERHEAD_B
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda i: types.SimpleNamespace(total_memory=int(10 * per_child / 0.85) + 1))
    assert default_warm_procs(SHAPE, ["0"]) == 10


BAR_RUNS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "2026-11-27-h200" / "moe-bar"
QWEN3 = "E=128 N=768 hidden=2048 topk=8 bfloat16"


def test_earlier_runs_give_each_batch_size_from_the_last_run_that_has_it():
    """The committed H200 bar: batch 64 was cut at 442 configs in the first run and covered whole in the second."""
    from astra_sglang.triton.moe.sglang_tuner_records import earlier_runs

    run, where = earlier_runs([BAR_RUNS / "qwen3-30b-a3b-1-64", BAR_RUNS / "qwen3-30b-a3b-64"], "NVIDIA H200", QWEN3,
                              [1, 64])
    assert [(b.tokens, b.covered, b.space) for b in run.batches] == [(1, 1920, 1920), (64, 1920, 1920)]
    assert run.batches[1].best == MoeConfig.from_code("m16n128k128g1w8s2").sglang()
    assert where == ("SGLang's tuner was not run here: its figures are those of earlier runs on this GPU and shape: "
                     "qwen3-30b-a3b-1-64 (2026-11-27, commit d5b82c5); qwen3-30b-a3b-64 (2026-11-27, commit d5b82c5).")
    only, _ = earlier_runs([BAR_RUNS / "qwen3-30b-a3b-1-64"], "NVIDIA H200", QWEN3, [64])
    assert only.batches[0].covered == 442  # the cut one, where it is the only one given


def test_a_cold_run_samples_every_gpu_and_gives_no_best(tmp_path, monkeypatch):
    """One batch size on two GPUs: both sample it (the second its own draw), its first config's one-time costs
    kept once; no warm phase, no timing loop."""
    log = tmp_path / "calls.jsonl"
    monkeypatch.setenv("STANDIN_CALLS", str(log))
    run = run_cold(TunerScript.open(tuner_folder(tmp_path, sleep=0.01)), SHAPE, [1], ["0", "1"], tmp_path / "work",
                   count=4, seed=0, seconds=60, cache_root=tmp_path / "caches")
    seen = calls(log)
    assert seen and all("triton-cold-" in c["cache"] for c in seen)  # no warm cache, no timing loop
    assert len({c["cache"] for c in seen}) == 2  # a cold cache per GPU
    assert run.mode == "cold" and [b.tokens for b in run.batches] == [1] and run.wall_s == 0.0 and run.cold_s > 0
    batch = run.batches[0]
    assert batch.mode == "cold" and batch.space == SPACE and batch.best is None
    assert len(batch.cold_costs) == 4 + 3  # the second child's first config (its one-time costs) dropped
    assert batch.estimate() is not None and run.users_wall() == pytest.approx(batch.estimate()[0])


def test_a_cold_runs_sample_gives_the_users_wall_to_the_runs_with_a_best(tmp_path):
    """The committed Qwen3 bar has no users' wall at batch 1 and 64; a cold run's folder given with them supplies
    one, and gives no best of its own (alone it is refused)."""
    from astra_sglang.errors import AstraError
    from astra_sglang.triton.moe.sglang_tuner_records import earlier_runs

    folders = [BAR_RUNS / "qwen3-30b-a3b-1-64", BAR_RUNS / "qwen3-30b-a3b-64"]
    before, _ = earlier_runs(folders, "NVIDIA H200", QWEN3, [1, 64])
    cold = tmp_path / "qwen3-cold"
    cold.mkdir()
    (cold / "bar.jsonl").write_text(json.dumps({"kind": "header", "gpu": "NVIDIA H200", "shape": QWEN3,
                                                "date": "2026-11-28", "commit": "abc1234"}) + "\n")
    costs = [12.0] + [0.9, 1.1] * 20
    batches = [TunerBatch(tokens=t, mode="cold", space=1920, cold_costs=costs) for t in (1, 64)]
    (cold / "tuner.json").write_text(TunerRun(files={}, mode="cold", gpus=["0", "1"], sample=21, wall_s=0.0,
                                              cold_s=80.0, batches=batches).model_dump_json())
    run, where = earlier_runs([*folders, cold], "NVIDIA H200", QWEN3, [1, 64])
    assert [b.best for b in run.batches] == [b.best for b in before.batches]  # the bests: the exhaustive runs'
    assert all(b.cold_costs == costs and b.mode == "exhaustive" for b in run.batches)
    assert run.wall_s == before.wall_s and run.users_wall() == pytest.approx(12.0 + 1.0 * 1919)  # one batch a GPU
    assert where.endswith("qwen3-cold (2026-11-28, commit abc1234, its cold sample).")
    with pytest.raises(AstraError, match="no earlier bar run given has batch size"):
        earlier_runs([cold], "NVIDIA H200", QWEN3, [1])


@pytest.mark.parametrize("folders, gpu, shape, tokens, said", [
    (["qwen3-30b-a3b-64"], "NVIDIA H100 80GB HBM3", QWEN3, [64],
     "was on NVIDIA H200, E=128 N=768 hidden=2048 topk=8 bfloat16; this one is on NVIDIA H100 80GB HBM3"),
    (["deepseek-v2-lite-1-64"], "NVIDIA H200", QWEN3, [64], "was on NVIDIA H200, E=64 N=1408"),
    (["qwen3-30b-a3b-64"], "NVIDIA H200", QWEN3, [1, 64], "no earlier bar run given has batch size(s) 1"),
    (["no-such-run"], "NVIDIA H200", QWEN3, [64], "no earlier bar run in "),
])
def test_earlier_runs_are_refused_in_one_line_where_they_do_not_fit(folders, gpu, shape, tokens, said):
    from astra_sglang.errors import AstraError
    from astra_sglang.triton.moe.sglang_tuner_records import earlier_runs

    with pytest.raises(AstraError, match=re.escape(said)) as caught:
        earlier_runs([BAR_RUNS / f for f in folders], gpu, shape, tokens)
    assert "\n" not in str(caught.value)
