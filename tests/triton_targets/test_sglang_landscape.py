"""SGLang's tuner's landscape (sglang_tuner_landscape): the wrapper that records every call of its benchmark_config,
where configs rank in it, our shared-memory model against Triton's refusals, and the bar report's table of it."""
from __future__ import annotations

import types

import pytest
from triton.runtime.errors import OutOfResources

from astra_sglang.triton.moe.bar_report import summarize, write_report
from astra_sglang.triton.moe.configs import Pick
from astra_sglang.triton.moe.sglang_tuner_child import Observed
from astra_sglang.triton.moe.sglang_tuner_landscape import landscape_of, out_of_smem, smem_check
from astra_sglang.triton.moe.sglang_tuner_records import TunerBatch, TunerRun
from astra_sglang.triton.moe.space import MoeConfig

H200_LIMIT = 232448
TIMES = {"m16n128k256g64w4s4": 10.0, "m128n128k128g1w8s4": 10.08, "m32n64k64g1w4s3": 10.25}
"""Timed by the loop: within 1% of the best, within 3%, and (m128n128k128g1w8s4, made up here) a tile of 64 rows
or more whose every stage (4 x 64 KiB) the model holds over an H200's limit."""
REFUSED = {"m64n128k128g1w4s5": 245760, "m128n128k256g1w8s2": 262144, "m32n256k256g1w8s2": 294912}
"""Refused by Triton for shared memory, with its 'Required': the first two as an H200 refused them (2026-11-27);
the third made up (a 32-row tile, which the model holds at one stage's tiles, 147,456 bytes: it keeps it)."""
BROKEN = "m16n32k64g1w4s2"
"""Failed otherwise: says nothing of shared memory."""


def fake_benchmark_config(config, num_tokens, num_iters=100):
    code = MoeConfig.from_sglang(config).code()
    if code in REFUSED:
        raise OutOfResources(REFUSED[code], H200_LIMIT, "shared memory")
    if code == BROKEN:
        raise RuntimeError("PassManager::run failed\nat the ttgir stage")
    return TIMES[code]


def observed_batch(tokens: int = 1, gpu: str = "NVIDIA H200") -> TunerBatch:
    """The loop's calls, as SGLang's loop makes them (config first, the rest by position and name), observed."""
    script = types.SimpleNamespace(benchmark_config=fake_benchmark_config)
    observed = Observed(script)
    for code in [*TIMES, *REFUSED, BROKEN]:
        try:
            script.benchmark_config(MoeConfig.from_code(code).sglang(), tokens, num_iters=10)
        except (OutOfResources, RuntimeError):
            continue  # as SGLang's loop skips it
    landscape, failed = observed.take()
    assert observed.take() == ({}, {}) and observed.inner is fake_benchmark_config
    return TunerBatch(tokens=tokens, mode="exhaustive", gpu=gpu, space=1920, given=1920, landscape=landscape,
                      failed=failed, skipped=len(failed))


def test_every_call_is_observed_and_each_failure_reraised_unchanged():
    batch = observed_batch()
    assert batch.landscape == TIMES
    assert batch.failed == {
        **{code: f"OutOfResources: out of resource: shared memory, Required: {required}, Hardware limit: 232448. "
                 "Reducing block sizes or `num_stages` may help." for code, required in REFUSED.items()},
        BROKEN: "RuntimeError: PassManager::run failed ... at the ttgir stage"}  # errors.describe
    assert out_of_smem(batch.failed["m64n128k128g1w4s5"]) == (245760, H200_LIMIT) and not out_of_smem(
        batch.failed[BROKEN])


def test_places_rank_a_config_among_those_timed_and_name_why_one_was_not():
    found = landscape_of(observed_batch(), {"pick": "m32n64k64g1w4s3", "ours": "m32n256k256g1w8s2",
                                            "other": "m64n64k32g8wdsd"})
    assert (found.timed, found.best_us, found.within_1, found.within_3) == (3, 10.0, 2, 3)
    pick, ours, other = found.places["pick"], found.places["ours"], found.places["other"]
    assert (pick.rank, pick.ratio) == (3, pytest.approx(1.025)) and not pick.failed
    assert ours.rank is None and ours.failed.startswith("OutOfResources: out of resource: shared memory")
    assert (other.rank, other.ratio, other.failed) == (None, None, "")
    assert landscape_of(TunerBatch(tokens=1, mode="exhaustive"), {"pick": "m32n64k64g1w4s3"}) is None


@pytest.mark.parametrize("element, wasted, pruned, gap", [
    (2, ["m32n256k256g1w8s2"], ["m128n128k128g1w8s4"], -0.5),
    (1, sorted(REFUSED), [], -0.75),  # fp8: half the bytes, so the model would keep all Triton refused
])
def test_the_shared_memory_model_against_tritons_refusals(element, wasted, pruned, gap):
    check = smem_check(observed_batch(), element)
    assert (check.limit, check.wgmma, check.refused) == (H200_LIMIT, True, 3)  # PassManager's failure not counted
    assert (check.wasted, check.pruned) == (wasted, pruned)
    assert check.gap == pytest.approx(gap) and check.gap_code == "m32n256k256g1w8s2"


def test_without_a_refusal_the_limit_is_the_gpus_and_an_empty_loop_has_no_check():
    batch = TunerBatch(tokens=1, mode="bounded", gpu="cpu", landscape={"m64n128k128g1w4s5": 12.0})
    check = smem_check(batch)  # no wgmma off Hopper: the model holds stages - 1 tiles, 196,608 bytes
    assert (check.limit, check.wgmma, check.refused, check.wasted, check.pruned, check.gap) == \
        (227 * 1024, False, 0, [], [], None)
    assert smem_check(TunerBatch(tokens=1, mode="bounded")) is None


HEADER = {"date": "2026-11-28", "gpu": "NVIDIA H200", "commit": "abc1234", "sglang": "0.5.17", "triton": "3.6.0",
          "shape": "128x768x2048 top-8", "command": "bash benchmarks/gpu/moe_sglang_bar.sh"}


def report(tmp_path, batches: list[TunerBatch], ours=None) -> str:
    run = TunerRun(files={}, mode="exhaustive", batches=batches, wall_s=300.0, gpus=["0"], warm_s=100.0,
                   timing_s=200.0, warm_procs=16)
    picks = {b.tokens: Pick(b.tokens, MoeConfig(64, 64, 32, 8), "default") for b in batches}
    text = write_report(tmp_path / "bar.md", HEADER, summarize(picks, run, [], ours), run).read_text()
    return " ".join(text.split())  # the template wraps its lines


def test_the_report_places_the_pick_and_ours_in_the_landscape_with_the_models_counts(tmp_path):
    ours = {1: MoeConfig.from_code("m32n64k64g1w4s3"), 64: MoeConfig.from_code("m32n256k256g1w8s2")}
    old = TunerBatch(tokens=256, mode="exhaustive", space=1920, given=1920)  # recorded before landscapes were kept
    text = report(tmp_path, [observed_batch(1), observed_batch(64), old], ours)
    assert "Its loop's landscape" in text
    assert "| 1 | 3 | 2 | 3 | not in its loop | 3 of 3, 1.025x | 1 of 3 refused | 1 | -50.0% (`m32n256k256g1w8s2`) |" \
        in text
    assert "| 64 | 3 | 2 | 3 | not in its loop | skipped (OutOfResources) | 1 of 3 refused | 1 | -50.0% " in text
    assert "| 256 | 3 |" not in text and "| 256 | 0 |" not in text


def test_the_landscape_table_is_left_out_where_no_landscape_was_kept(tmp_path):
    text = report(tmp_path, [TunerBatch(tokens=1, mode="exhaustive", space=1920, given=1920)])
    assert "landscape" not in text and "ours" in text
