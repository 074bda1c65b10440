"""On a GPU: every rejection class has a fixture kernel (tests/fixtures/cheats/) and is rejected for its own
reason, through the isolated evaluator a user's `bench` and the agents use; honest kernels pass."""
from pathlib import Path

import pytest

from astra_sglang.harness.isolate import evaluate
from astra_sglang.harness.limits import PRECISION_MULTIPLE
from astra_sglang.harness.records import EvalRequest, KernelSource
from astra_sglang.harness.sanitize import SanitizeRequest, sanitize
from astra_sglang.paths import kernels_dir, patches_dir
from astra_sglang.specs.registry import get_spec, resolve_shapes

pytestmark = pytest.mark.gpu
CHEATS = Path(__file__).parents[1] / "fixtures" / "cheats"


def _eval(fixture, shapes, op="silu_and_mul", time=True, dtypes=("bfloat16",)):
    return evaluate(EvalRequest(kernel=op, candidate=KernelSource(path=str(CHEATS / fixture)), shapes=shapes,
                                dtypes=list(dtypes), time=time, timeout_s=200))


@pytest.mark.parametrize("fixture, shape, reason", [
    # checked right, timed wrong: the outputs of the timed replays are checked after timing
    ("capture_noop.cu", (64, 4096), "the timed graph, launch 0 of"),
    ("capture_noop.cu", (8192, 14336), "the timed graph, launch 0 of"),
    ("call_counter.cu", (64, 4096), "the timed graph, launch 0 of"),
    # guard regions and inputs compared bit for bit
    ("out_of_bounds.cu", (64, 4096), "out: wrote outside the tensor, at element +0 past its end"),
    ("out_of_bounds.cu", (5, 4100), "out: wrote outside the tensor, at element +0 past its end"),
    ("writes_input.cu", (64, 4096), "input: wrote into an input-only argument"),
    # physics: the work is right but ran outside the timed region
    ("host_handoff.cu", (8192, 14336), "measurement failure"),
])
def test_silu_cheats_are_rejected_for_their_reason(fixture, shape, reason):
    result = _eval(fixture, [shape])
    assert not result.ok and reason in result.reason, result.reason
    row = result.shapes[0]
    assert row.correct is False and row.candidate is None and row.speedup is None  # never reported as timed


def test_timed_work_must_be_the_checked_work_also_where_it_never_writes():
    result = _eval("capture_noop.cu", [(64, 4096)])
    assert "never written" in result.reason, result.reason


def test_a_norm_that_sums_in_bf16_is_less_precise_than_the_original():
    result = _eval("low_precision_sum.cu", [(64, 8192)], op="rmsnorm", time=False)
    row = result.shapes[0]
    assert not result.ok and "less precise than the original" in row.reason, row.reason
    assert row.max_err_ratio < 1.0  # inside the absolute tolerance: only the ratio catches it
    assert row.err_rms > PRECISION_MULTIPLE["bfloat16"] * row.baseline_err_rms


def test_a_kernel_for_the_first_rows_only_fails_at_the_gate():
    spec = get_spec("silu_and_mul")
    small = [s for s in resolve_shapes(spec, "paper") if s[0] <= 4096]
    assert _eval("first_rows.cu", small, time=False).ok  # a gate that tops out lower lets it through
    large = [s for s in resolve_shapes(spec, "gate") if s[0] > 4096]
    result = _eval("first_rows.cu", large[:1], time=False)
    assert not result.ok and "unwritten" in result.reason, result.reason


def test_declined_shapes_count_as_one():
    shapes = [(64, 4096), (64, 8192), (16, 12288), (32, 5120), (512, 14336)]
    result = _eval("declines_most.cu", shapes)
    assert result.ok, result.reason
    served = [s for s in result.shapes if s.covered]
    assert len(served) == 1 and served[0].speedup
    assert result.geomean_speedup == pytest.approx(served[0].speedup ** (1 / len(shapes)))


def test_honest_kernels_pass_every_new_check():
    for op in ("silu_and_mul", "rmsnorm", "fused_add_rmsnorm", "merge_attn_states_lse"):
        spec = get_spec(op)
        result = evaluate(EvalRequest(kernel=op, candidate=KernelSource(path=str(patches_dir() / op / "kernel.cu")),
                                      shapes=resolve_shapes(spec, "quick+edge"), dtypes=["bfloat16", "float32"],
                                      time=True, timeout_s=900))
        assert result.ok, result.reason
        assert all(s.correct for s in result.shapes if s.covered)


@pytest.mark.parametrize("fixture, op, tool", [("out_of_bounds.cu", "silu_and_mul", "memcheck"),
                                               ("smem_race.cu", "rmsnorm", "racecheck")])
def test_compute_sanitizer_rejects(fixture, op, tool):
    reports = {r.tool: r for r in sanitize(SanitizeRequest(kernel=op, source=str(CHEATS / fixture),
                                                           shapes=[(3, 11), (64, 4096)], dtypes=["bfloat16"]))}
    if not reports[tool].ran:
        pytest.skip(reports[tool].detail)
    assert not reports[tool].ok and reports[tool].findings > 0, reports[tool]


def test_compute_sanitizer_passes_our_kernels():
    for op in ("silu_and_mul", "rmsnorm"):
        reports = sanitize(SanitizeRequest(kernel=op, source=str(kernels_dir() / f"{op}.cu"),
                                           shapes=[(1, 4096), (3, 11), (64, 4096)], dtypes=["bfloat16"]))
        for report in reports:
            assert report.ok or not report.ran, report
