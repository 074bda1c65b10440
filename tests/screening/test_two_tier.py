"""Fused MoE through both tiers on CPU: the screening tier on two simulated GPUs (the cost model standing in for
the GPU's times), its finalists through a fake strict evaluator that agrees with it, the final evaluation, the
written file; the screen cache on a second run; finalists only where a config screened as fast as the pick."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from moe_fakes import ARGS, FACTS, LANDSCAPE, PICK, SHAPE, Strict, us_of

from astra_sglang.optimize.tuner.moe_run import TuneOptions, tune_fused_moe
from astra_sglang.optimize.tuner.moe_two_tier import ScreenOptions
from astra_sglang.optimize.tuner.two_tier import BucketScreen, finalists
from astra_sglang.triton.moe import configs as moe_configs
from astra_sglang.triton.moe.configs import Pick
from astra_sglang.triton.moe.space import MoeConfig
from astra_sglang.triton.screen_records import Screened, ScreenStats

def _picks(sizes):
    return [Pick(t, PICK, "default") for t in sizes]


def _options(tmp_path, **screen):
    launch = {"landscape": LANDSCAPE, "landscape_args": ARGS,
              "compile_s": 0.0, "call_s": 0.0005, "faults": screen.pop("faults", {})}
    return TuneOptions(use_cache=screen.pop("use_cache", False), patches_dir=tmp_path / "patches",
                       screen=ScreenOptions(gpus=["0", "1"], finalists=2, compile_workers=2, config_timeout_s=10,
                                            target="astra_sglang.optimize.tuner.screen_simulate:SimulatedLaunch",
                                            launch_options=launch, **screen))


def test_screening_finalists_go_through_the_strict_tier_which_writes(tmp_path, monkeypatch):
    monkeypatch.setenv("ASTRA_SGLANG_CACHE", str(tmp_path / "cache"))
    strict = Strict()
    faults = {MoeConfig(16, 64, 128, 1, 4, 3).code(): "segv"}
    result = tune_fused_moe(SHAPE, [1, 256], tmp_path / "run", _options(tmp_path, faults=faults), strict, facts=FACTS,
                            picks_at=_picks, echo=lambda _: None)
    # one strict evaluation per finalist rank (both batch sizes at once), then the final one
    assert result.evaluations == 3 and len(strict.requests) == 3
    assert [s.bucket for s in result.screen] == [1, 256] and all(s.screened == s.configs for s in result.screen)
    rows = [json.loads(line) for line in (tmp_path / "run" / "screen.jsonl").read_text().splitlines()]
    assert {r["stage"] for r in rows} >= {"done", "crash", "pruned"}
    for b in result.buckets:
        screened = [r for r in rows if r["bucket"] == b.tokens and r["stage"] == "done"]
        best = min(screened, key=lambda r: r["us"])
        assert b.screen_best == best["config"] and b.verdict == "tuned"
        assert b.chosen == best["config"]  # the strict tier agrees here, so the screened best is written
        assert b.final_speedup == pytest.approx(us_of(PICK, b.tokens) / best["us"])
    written = moe_configs.read(tmp_path / "patches" / "fused_moe" / result.config_file.split("fused_moe/")[1])
    assert set(moe_configs.BATCH_SIZES) <= set(written)  # every key SGLang reads
    assert any("left at SGLang's pick (not tuned)" in n for n in result.notes)
    assert "Two tiers" in (tmp_path / "run" / "tune.md").read_text()


def test_a_second_run_reuses_the_screen_cache_but_screens_the_pick_again(tmp_path, monkeypatch):
    monkeypatch.setenv("ASTRA_SGLANG_CACHE", str(tmp_path / "cache"))
    tune_fused_moe(SHAPE, [16], tmp_path / "a", _options(tmp_path, use_cache=True), Strict(), facts=FACTS,
                   picks_at=_picks, echo=lambda _: None)
    again = tune_fused_moe(SHAPE, [16], tmp_path / "b", _options(tmp_path, use_cache=True), Strict(), facts=FACTS,
                           picks_at=_picks, echo=lambda _: None)
    assert again.screen[0].configs == again.screen[0].screened == 1  # the pick alone; the rest came from the cache
    first = json.loads((tmp_path / "a" / "screen.json").read_text())[0]
    assert again.buckets[0].screened == first["screened"] > 1000
    assert again.buckets[0].screen_best is not None


def test_the_screen_budget_leaves_configs_unscreened(tmp_path, monkeypatch):
    # 0.05 s: the simulated screen took under 2 s for its 2,637 configs on a CI machine, so the budget is 40x
    # below a whole screen, not a race with it
    monkeypatch.setenv("ASTRA_SGLANG_CACHE", str(tmp_path / "cache"))
    result = tune_fused_moe(SHAPE, [1, 64], tmp_path / "run", _options(tmp_path, budget_s=0.05), Strict(),
                            facts=FACTS, picks_at=_picks, echo=lambda _: None)
    assert sum(s.screened for s in result.screen) < sum(s.configs for s in result.screen)
    rows = [json.loads(line) for line in (tmp_path / "run" / "screen.jsonl").read_text().splitlines()]
    assert {r["reason"] for r in rows if r["stage"] == "unscreened"} == {"the screening budget ran out first"}


def _screen(times: dict[str, float | None]) -> BucketScreen:
    results = [Screened(config=c, bucket=1, stage="done" if us else "check", us=us) for c, us in times.items()]
    return BucketScreen(results=results, stats=ScreenStats.of(1, list(times), results, gpus=["gpu0"], wall_s=1.0))


def test_finalists_are_configs_as_fast_as_the_pick_fastest_first():
    screen = _screen({"pick": 100.0, "a": 90.0, "b": 100.5, "c": 102.0, "d": None, "e": 95.0})
    assert finalists(screen, "pick", 5) == ["a", "e", "b"]  # b within 1% of the pick; c is not
    assert finalists(screen, "pick", 2) == ["a", "e"]
    assert finalists(_screen({"pick": None, "a": 120.0, "b": 110.0}), "pick", 1) == ["b"]  # no bar: the fastest


def test_with_a_family_each_familys_fastest_comes_first_then_the_rest_by_rank():
    screen = _screen({"pick": 100.0, "a1": 90.0, "a2": 90.1, "a3": 90.2, "b1": 95.0, "c1": 99.0, "b2": 96.0})
    family = lambda code: code[0]  # noqa: E731
    assert finalists(screen, "pick", 2, family=family) == ["a1", "b1"]
    assert finalists(screen, "pick", 4, family=family) == ["a1", "b1", "c1", "a2"]
    assert finalists(screen, "pick", 9, family=family) == ["a1", "b1", "c1", "a2", "a3", "b2"]
    assert finalists(screen, "pick", 2) == ["a1", "a2"]  # no family: rank only


def test_moe_finalists_are_one_per_tile_on_the_h200_qwen3_batch_64_screen():
    """The committed screen where the top five were one tile's variants: with a finalist per tile, SGLang tuner's
    best (m16n128k128g1w8s2, sixth) goes to the strict tier second."""
    from astra_sglang.optimize.tuner.moe_two_tier import tile

    path = (Path(__file__).parents[2] / "benchmarks/results/2026-11-27-h200/moe-bar/ours-qwen3-30b-a3b-64/tiers/screen"
            / "qwen3-30b-a3b@64.jsonl.gz")
    rows = [Screened.model_validate_json(line) for line in gzip.decompress(path.read_bytes()).decode().splitlines()]
    screen = BucketScreen(results=rows, stats=ScreenStats.of(64, [r.config for r in rows], rows, gpus=["1"],
                                                             wall_s=1.0))
    pick = "m16n256k128g1w8s2"
    assert finalists(screen, pick, 2) == ["m16n64k128g1w4s3", "m16n64k128g16w4s3"]
    assert finalists(screen, pick, 2, family=tile) == ["m16n64k128g1w4s3", "m16n128k128g1w8s2"]
    assert tile("m16n64k128g1w4s3+splitk:su2sd1") == (16, 64, 128)


def test_a_screen_from_records_keeps_the_orders_configs_and_ranks_those_that_screened():
    """BucketScreen.of: what a run's records hold at a bucket (an earlier run's, or the tiers' export), in the
    order given, less configs the order does not have; ranked: done and timed, fastest first (slow and failed
    ones left out)."""
    rows = [Screened(config=c, bucket=4, stage=stage, us=us) for c, stage, us in [
        ("a", "done", 90.0), ("b", "slow", 300.0), ("c", "load", None), ("d", "done", 80.0), ("e", "done", 85.0)]]
    known = {r.config: r for r in rows}
    screen = BucketScreen.of(4, known, ["e", "x", "a", "b", "c"])
    assert [r.config for r in screen.results] == ["e", "a", "b", "c"] and screen.stats.configs == 5
    assert [r.config for r in screen.ranked()] == ["e", "a"] and screen.stats.best == "e"
    assert [r.config for r in BucketScreen.of(4, known).ranked()] == ["d", "e", "a"]


def test_the_cut_share_is_what_the_whole_h200_screens_measured():
    """JUDGE_CUT_SHARE's evidence: in the seven whole unquantized H200 screens committed, the best came at most 15%
    into the order and the last config within 1% of it at most 30% in (20% and 42% among the configs timed in
    full): a screen cut past half its order has reached them."""
    from astra_sglang.optimize.tuner.two_tier import JUDGE_CUT_SHARE

    results = Path(__file__).parents[2] / "benchmarks" / "results" / "2026-11-27-h200"
    paths = [p for p in [*results.glob("moe-bar/ours-*/tiers/screen/*.jsonl.gz"),
                         results / "moe-tiers" / "screen" / "mixtral@64.jsonl.gz"]
             if "+knob" not in p.name and "fp8" not in p.name]
    assert len(paths) == 7
    in_order, in_timed = [], []
    for path in paths:
        rows = [json.loads(line) for line in gzip.decompress(path.read_bytes()).decode().splitlines()]
        for seq, out in ((rows, in_order), ([r for r in rows if r["stage"] == "done"], in_timed)):
            best = min(r["us"] for r in seq if r["stage"] == "done")
            first = next(i for i, r in enumerate(seq) if r["stage"] == "done" and r["us"] == best)
            last = max(i for i, r in enumerate(seq) if r["stage"] == "done" and r["us"] <= 1.01 * best)
            out.append((first / len(seq), last / len(seq)))
    worst = [tuple(round(100 * max(x[k] for x in out)) for k in (0, 1)) for out in (in_order, in_timed)]
    assert worst == [(15, 30), (20, 42)]
    assert max(last for _, last in in_order) < JUDGE_CUT_SHARE
