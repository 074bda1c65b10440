"""On a GPU: our kernels pass every check on every shape; every fault fails that candidate only, for its reason
(the cheat fixtures: tests/evaluator/test_gpu_fixtures.py)."""
from pathlib import Path

import pytest
from click.testing import CliRunner

from astra_sglang.cli import main
from astra_sglang.harness.isolate import evaluate
from astra_sglang.harness.records import EvalRequest, KernelSource
from astra_sglang.harness.timing import MAX_LAUNCHES, MIN_REPLAY_US
from astra_sglang.paths import kernels_dir, patches_dir
from astra_sglang.specs.registry import get_spec, resolve_shapes

pytestmark = pytest.mark.gpu
FIXTURES = Path(__file__).parent / "fixtures"
PATCHES = patches_dir()
OPS = ["silu_and_mul", "fused_add_rmsnorm", "rmsnorm", "merge_attn_states_lse", "merge_state"]


def _request(kernel, path, shapes, dtypes=("bfloat16",), time=False, timeout=900.0):
    return EvalRequest(kernel=kernel, candidate=KernelSource(path=str(path)), shapes=shapes, dtypes=list(dtypes),
                       time=time, timeout_s=timeout)


@pytest.mark.parametrize("op", OPS)
def test_our_kernels_pass_everywhere(op):
    spec = get_spec(op)
    shapes = resolve_shapes(spec, "quick+paper+edge+held_out")
    result = evaluate(_request(op, kernels_dir() / f"{op}.cu", shapes, spec.dtypes))
    assert result.ok, result.reason
    assert len(result.shapes) == len(shapes) * len(spec.dtypes)
    assert all(s.correct for s in result.shapes)


def test_honest_vectorized_fixture_passes_and_is_timed():
    result = evaluate(_request("silu_and_mul", FIXTURES / "honest" / "silu_and_mul_vec.cu",
                               [(1, 4096), (5, 4100), (3, 11), (512, 14336)], time=True))
    assert result.ok, result.reason
    for row in result.shapes:
        assert row.speedup and row.candidate.median_us > 0 and row.pct_roofline > 0
        assert row.eager_candidate_us and row.eager_baseline_us
        # a replay's launches, each on its own set: what MIN_REPLAY_US asks at this shape's floor, or more
        assert row.launches >= min(-(-MIN_REPLAY_US // row.floor_us), MAX_LAUNCHES)


@pytest.mark.parametrize("fixture, stage, reason", [
    ("segfault.cu", "crash", "SIGSEGV"),
    ("illegal_address.cu", "crash", "illegal memory access"),
    ("hang.cu", "timeout", "timed out after"),
    ("broken.cu", "build", "this_name_does_not_exist"),
])
def test_faults_fail_only_that_candidate(fixture, stage, reason):
    result = evaluate(_request("silu_and_mul", FIXTURES / "faults" / fixture, [(64, 4096)], timeout=60))
    assert not result.ok and result.stage == stage and reason in result.reason, result.reason
    after = evaluate(_request("silu_and_mul", kernels_dir() / "silu_and_mul.cu", [(64, 4096)]))
    assert after.ok


def test_merge_baseline_nan_on_empty_states_is_a_defect_not_a_failure(tmp_path):
    # A kernel that computes 0/0 like sgl-kernel: kept as a fixture of the baseline defect.
    result = evaluate(EvalRequest(kernel="merge_attn_states_lse",
                                  candidate=KernelSource(path=str(kernels_dir() / "merge_attn_states_lse.cu")),
                                  baseline=KernelSource(path=str(FIXTURES / "honest" / "merge_nan_on_empty.cu")),
                                  shapes=[(64, 8, 128)], dtypes=["bfloat16"], time=False))
    assert result.ok, result.reason
    assert "both_lse_neg_inf" in result.shapes[0].baseline_defect


def test_bench_cli_prints_the_table(tmp_path):
    out = CliRunner().invoke(main, ["bench", "silu_and_mul", "--shapes", "16x4096,8192x14336", "--dtypes", "bf16",
                                    "--out", str(tmp_path / "r.jsonl")])
    assert out.exit_code == 0, out.output
    for column in ("speedup", "GB/s", "% roof", "eager"):
        assert column in out.output
    assert (tmp_path / "r.jsonl").read_text().count('"type": "shape"') == 2


def test_a_baseline_fault_is_not_the_candidates():
    # SGLang's sgl_kernel.silu_and_mul does the same unchecked 16-byte loads (seen at 5x4100 bf16 on an H200).
    shapes = [(4, 64), (5, 4100), (3, 128)]
    result = evaluate(EvalRequest(kernel="silu_and_mul",
                                  candidate=KernelSource(path=str(PATCHES / "silu_and_mul" / "kernel.cu")),
                                  baseline=KernelSource(path=str(FIXTURES / "faults" / "misaligned_baseline.cu")),
                                  shapes=shapes, dtypes=["bfloat16"], time=True, timeout_s=300))
    assert result.ok, result.reason
    assert [tuple(s.shape) for s in result.shapes] == shapes
    crashed = result.shapes[1]
    assert crashed.correct and crashed.baseline_defect.startswith("the original op crashed here")
    assert "misaligned" in crashed.baseline_defect and crashed.speedup is None and crashed.candidate
    assert all(s.correct and s.speedup for s in (result.shapes[0], result.shapes[2]))


def test_a_baseline_fault_in_the_timing_is_named_and_not_the_candidates():
    # The baseline passes every check and faults only in a replayed graph: the timing names the side whose
    # launches faulted, the shape is re-run against the reference alone, and the candidate is still timed.
    shapes = [(4, 64), (3, 128)]
    result = evaluate(EvalRequest(kernel="silu_and_mul",
                                  candidate=KernelSource(path=str(PATCHES / "silu_and_mul" / "kernel.cu")),
                                  baseline=KernelSource(path=str(FIXTURES / "faults" / "capture_fault_baseline.cu")),
                                  shapes=shapes, dtypes=["bfloat16"], time=True, timeout_s=300))
    assert result.ok, result.reason
    for row in result.shapes:
        assert row.correct and row.baseline_defect.startswith("the original op crashed here"), row
        assert "in the baseline" in row.baseline_defect and row.speedup is None and row.candidate
