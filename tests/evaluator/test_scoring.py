"""Physics bound, scoring with declined shapes at 1.0x, the regression floor, winner selection and the
acceptance gate: pure logic on fake results."""
import json

import pytest
from rich.console import Console

from astra_sglang.harness.gpu_eval import physics
from astra_sglang.harness.limits import COMPUTE_MARGIN, FLOOR_MARGIN, REGRESSION_FLOOR, ROOFLINE_MARGIN
from astra_sglang.harness.records import EvalResult, SandwichTiming, ShapeResult, Timing
from astra_sglang.harness.report import print_result, write_jsonl
from astra_sglang.optimize.records import LLMConfig, RunConfig
from astra_sglang.optimize.winner import eligible, select_winner
from astra_sglang.specs.registry import GATE, all_specs, model_shapes, resolve_shapes


def _row(shape, speedup=None, covered=True, us=10.0, nbytes=1 << 20):
    return ShapeResult(shape=shape, dtype="bfloat16", correct=True if covered else None, covered=covered,
                       speedup=speedup, min_bytes=nbytes, candidate=Timing(median_us=us, p10_us=us, p90_us=us))


def _result(rows):
    return EvalResult(kernel="silu_and_mul", candidate="c", ok=True, stage="done", shapes=rows)


@pytest.mark.parametrize("us, nbytes, hot, bad", [
    (10.0, 10 << 20, False, False),     # 1049 GB/s against a 3000 GB/s roofline
    (1.0, 10 << 20, False, True),       # 10486 GB/s: more than 1.25x the roofline
    (1.0, 10 << 20, True, False),       # L2 hot: the DRAM roofline does not bind
    (0.5, 1 << 10, False, True),        # below the empty kernel's 0.8 us
    (0.8 * FLOOR_MARGIN * 1.01, 1 << 10, True, False),
])
def test_physics_bound(us, nbytes, hot, bad):
    reason = physics(_row((1, 8), us=us, nbytes=nbytes), roofline_gbps=3000.0, empty_us=0.8, hot=hot)
    assert bool(reason) is bad
    if bad:
        assert reason.startswith("measurement failure")


def test_roofline_margin_edge():
    at = (1 << 30) / (ROOFLINE_MARGIN * 3000.0) / 1e3  # exactly ROOFLINE_MARGIN x the roofline
    assert physics(_row((1, 8), us=at * 1.001, nbytes=1 << 30), 3000.0, 0.8, False) == ""
    assert physics(_row((1, 8), us=at * 0.999, nbytes=1 << 30), 3000.0, 0.8, False)


def test_declined_shapes_count_as_one_in_the_geomean():
    one_of_five = _result([_row((1, 4096), 1.5)] + [_row((i, 64), covered=False) for i in range(2, 6)])
    assert one_of_five.geomean_speedup == pytest.approx(1.5 ** (1 / 5))
    everywhere = _result([_row((i, 64), 1.1) for i in range(1, 6)])
    assert everywhere.geomean_speedup == pytest.approx(1.1)
    # the winner is the one that is faster where the server runs, not the one with the best single shape
    config = RunConfig(kernel="silu_and_mul", start_source="s.cu", llm=LLMConfig(model="m"))
    winner = select_winner("silu_and_mul", {1: one_of_five, 2: everywhere}, {1: "a.cu", 2: "b.cu"}, config, "m", "r")
    assert winner.round == 2


def test_untimed_rows_do_not_count_and_regressions_disqualify():
    rows = [_row((1, 8), 1.2), _row((2, 8), None), _row((3, 8), REGRESSION_FLOOR - 0.01)]
    result = _result(rows)
    assert result.geomean_speedup == pytest.approx((1.2 * (REGRESSION_FLOOR - 0.01)) ** 0.5)
    assert [tuple(s.shape) for s in result.regressions(REGRESSION_FLOOR)] == [(3, 8)]
    assert "slower than the original at 1 shape" in eligible(result)
    assert eligible(_result([_row((1, 8), 1.2), _row((3, 8), REGRESSION_FLOOR + 0.01)])) == ""
    config = RunConfig(kernel="silu_and_mul", start_source="s.cu", llm=LLMConfig(model="m"))
    assert select_winner("silu_and_mul", {1: result}, {1: "a.cu"}, config, "m", "r") is None


@pytest.mark.parametrize("spec", all_specs(), ids=lambda s: s.name)
def test_the_gate_holds_every_shape_the_patch_will_serve(spec):
    gate = resolve_shapes(spec, "gate")
    for name in GATE:  # every set whole, so the largest token count of each
        assert set(resolve_shapes(spec, name)) <= set(gate), name
    tokens = [s[0] for s in gate]
    assert 1 in tokens
    assert max(tokens) >= max([s[0] for s in model_shapes(spec)] + [s[0] for s in resolve_shapes(spec, "quick")])
    odd_allowed = spec.supports(tuple(gate[0][:-1]) + (12,))  # merge: head_dim % 8 == 0 by SGLang's contract
    if odd_allowed:
        assert any(s[-1] % 8 for s in gate), "a width that is not a multiple of a 16-byte bf16 vector"


def _flops_row(us, nbytes, flops):
    row = _row((64, 8), us=us, nbytes=nbytes)
    row.flops = flops
    return row


@pytest.mark.parametrize("us, flops, hot, bad", [
    (1000.0, 500 * 10 ** 9, False, False),   # 500 TFLOP/s against an 800 TFLOP/s matmul rate
    (400.0, 500 * 10 ** 9, False, True),     # 1250 TFLOP/s: more than 1.25x the matmul rate
    (400.0, 500 * 10 ** 9, True, True),      # compute does not come from L2: hot timing is held to it too
    (400.0, 0, False, False),                # no FLOPs counted: only bytes and the empty kernel bind
])
def test_physics_compute_bound(us, flops, hot, bad):
    # 1 MB: far inside the copy roofline at these times, so only the FLOPs can rule a time out.
    reason = physics(_flops_row(us, 1 << 20, flops), 3000.0, 0.8, hot, tflops=800.0)
    assert bool(reason) is bad
    if bad:
        assert reason.startswith("measurement failure") and "TFLOP/s matmul rate" in reason


def test_physics_whichever_binds():
    # Bytes bind here (a memory-bound call with few FLOPs): the compute check passes, the roofline's fails.
    row = _flops_row(1.0, 10 << 20, 10 ** 6)
    assert "copy roofline" in physics(row, 3000.0, 0.8, False, tflops=800.0)
    at = 500 * 10 ** 9 / (COMPUTE_MARGIN * 800.0) / 1e6  # exactly COMPUTE_MARGIN x the rate
    assert physics(_flops_row(at * 1.001, 1 << 20, 500 * 10 ** 9), 3000.0, 0.8, False, tflops=800.0) == ""
    assert physics(_flops_row(at * 0.999, 1 << 20, 500 * 10 ** 9), 3000.0, 0.8, False, tflops=800.0)
    assert physics(_flops_row(at * 0.999, 1 << 20, 500 * 10 ** 9), 3000.0, 0.8, False, tflops=None) == ""


def test_shape_cost_defaults_to_the_tensors_bytes():
    from astra_sglang.harness.cost import Cost, shape_cost
    from astra_sglang.specs.registry import get_spec

    spec = get_spec("rmsnorm")
    assert shape_cost(spec, (16, 4096), "float16") == Cost(spec.min_bytes((16, 4096), "float16"), 0)


def _placed(speedup):
    t = Timing(median_us=1.0, p10_us=1.0, p90_us=1.0)
    return SandwichTiming(model="llama-3-8b", before="down_proj 64x14336x4096", after="qkv_proj 64x4096x6144",
                          repeats=8, gemms_us=t, candidate_us=t, baseline_us=t, op_candidate_us=2.0,
                          op_baseline_us=2.0 * speedup, speedup=speedup, saved_us=0.1)


def test_a_shape_timed_in_place_is_scored_by_its_in_place_speedup(tmp_path):
    rows = [_row((64, 4096), 1.10), _row((1, 4096), 1.20)]
    rows[1].sandwich = _placed(0.97)  # faster alone, slower between its GEMMs
    result = _result(rows)
    assert [v for _, v in result.scored()] == [1.10, 0.97]
    assert result.regressions(0.98) == [rows[1]]
    console = Console(record=True, width=220)
    print_result(result, console)
    text = console.export_text()
    assert "in place speedup" in text and "0.970x" in text and "(in place where timed in place)" in text
    write_jsonl(result, tmp_path / "r.jsonl")
    line = json.loads((tmp_path / "r.jsonl").read_text().splitlines()[1])
    assert line["sandwich"]["speedup"] == 0.97 and line["speedup"] == 1.20  # both figures in the rows


def test_served_shapes_are_the_sandwich_models_at_every_token_count():
    for spec in all_specs():
        served = resolve_shapes(spec, "served")
        assert bool(served) == bool(spec.sandwich)
        assert all(s in model_shapes(spec) for s in served)
