"""On a GPU: every rejection class has a fixture (tests/fixtures/cheats/: kernel files, and `py:` callables in
py_cheats.py) and is rejected for its own reason, through the isolated evaluator a user's `bench` and the
agents use; honest kernels pass. The evaluations a correctness check rejects run a few at a time (each claims
its memory from the GPU's ledger, harness/budget.py); those judged by their times run alone afterwards."""
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from astra_sglang.harness.isolate import evaluate, prebuild
from astra_sglang.harness.limits import PRECISION_MULTIPLE
from astra_sglang.harness.records import EvalRequest, KernelSource
from astra_sglang.harness.sanitize import SanitizeRequest, sanitize
from astra_sglang.paths import kernels_dir, patches_dir
from astra_sglang.specs.registry import get_spec, resolve_shapes

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).parents[2]
CHEATS = ROOT / "tests" / "fixtures" / "cheats"
TIMED_GRAPH = "the timed graph, launch "
PAST_END = "out: wrote outside the tensor, at element +0 past its end"
PY = "py:tests.fixtures.cheats.py_cheats:"

CASES = {  # id: (candidate, shape, judged by its times, what the reason holds: any of)
    # the correctness trials
    "noop": ("noop.cu", (64, 4096), False, ["out: never written"]),
    "partial_write": ("partial_write.cu", (64, 4096), False, ["elements left unwritten (still"]),
    "cache_results": ("cache_results.cu", (64, 4096), False, ["skips work or caches results for repeated inputs"]),
    "own_stream": ("own_stream.cu", (64, 4096), False, ["work not ordered on the given stream"]),
    "foreign_buffer": ("foreign_buffer.cu", (64, 4096), False, ["reads memory of an earlier call"]),
    "low_precision": ("low_precision.cu", (64, 4096), False, ["too imprecise"]),
    "out_of_bounds": ("out_of_bounds.cu", (64, 4096), False, [PAST_END]),
    "out_of_bounds_odd": ("out_of_bounds.cu", (5, 4100), False, [PAST_END]),
    "writes_input": ("writes_input.cu", (64, 4096), False, ["input: wrote into an input-only argument"]),
    # a kernel that reads its own outputs to skip work: the checks' outputs now hold what timed ones can
    "skip_if_written": ("skip_if_written.cu", (64, 4096), False, ["elements left unwritten (still", "never written"]),
    "skip_if_done": ("skip_if_done.cu", (64, 4096), False, ["skips work when most of its input repeats"]),
    # checked right, timed wrong: every timed launch is checked as the timed replay left it
    "capture_noop": ("capture_noop.cu", (64, 4096), False, [TIMED_GRAPH]),
    "capture_noop_large": ("capture_noop.cu", (8192, 14336), False, [TIMED_GRAPH]),
    "call_counter": ("call_counter.cu", (64, 4096), False, [TIMED_GRAPH]),
    "graph_skip_repeated": ("graph_skip_repeated.cu", (64, 4096), False, [TIMED_GRAPH]),
    "batch_launches": ("batch_launches.cu", (1, 4096), False, [TIMED_GRAPH]),
    "batch_launches_wide": ("batch_launches.cu", (64, 14336), False, [TIMED_GRAPH]),
    "timer_gap": ("timer_gap.cu", (16, 4096), False, [TIMED_GRAPH]),
    # Python candidates: views handed in, the timer and the harness watched
    "py_swaps_storage": (PY + "silu_swaps_storage", (64, 4096), False, ["replaced a tensor it was handed"]),
    "py_lazy": (PY + "silu_lazy", (64, 4096), False, ["replaced a tensor it was handed"]),
    "py_slow_clock": (PY + "silu_with_a_slow_clock", (64, 4096), False,
                      ["changed the harness's own torch.cuda.Event.elapsed_time"]),
    # the work is right but runs outside the timed region: its fingerprints or its time give it away
    "host_handoff": ("host_handoff.cu", (8192, 14336), True,
                     ["changed after the timed launches ended on the stream", "measurement failure"]),
}


def _source(candidate: str) -> KernelSource:
    return KernelSource(path=candidate if candidate.startswith("py:") else str(CHEATS / candidate))


def _eval(fixture, shapes, op="silu_and_mul", time=True, dtypes=("bfloat16",)):
    return evaluate(EvalRequest(kernel=op, candidate=_source(fixture), shapes=shapes, dtypes=list(dtypes),
                                time=time, timeout_s=200))


@pytest.fixture(scope="module")
def cheat_results(monkeypatch_module):
    """Every case's evaluation: builds first (in parallel), the correctness-judged ones three at a time."""
    monkeypatch_module.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    prebuild([(str(CHEATS / c), {}, None) for c, *_ in CASES.values() if not c.startswith("py:")])
    run = {name: (lambda c=case: _eval(c[0], [c[1]])) for name, case in CASES.items()}
    with ThreadPoolExecutor(3) as pool:
        futures = {name: pool.submit(run[name]) for name, case in CASES.items() if not case[2]}
        results = {name: f.result() for name, f in futures.items()}
    results.update({name: run[name]() for name, case in CASES.items() if case[2]})
    return results


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


@pytest.mark.parametrize("case", list(CASES))
def test_every_cheat_is_rejected_for_its_reason(cheat_results, case):
    result, reasons = cheat_results[case], CASES[case][3]
    assert not result.ok and any(r in result.reason for r in reasons), result.reason
    row = result.shapes[0]
    assert row.correct is False and row.candidate is None and row.speedup is None  # never reported as timed


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


HONEST = ("silu_and_mul", "rmsnorm", "fused_add_rmsnorm", "merge_attn_states_lse")


def test_honest_kernels_pass_every_new_check():
    def one(op):
        spec = get_spec(op)
        return evaluate(EvalRequest(kernel=op, candidate=KernelSource(path=str(patches_dir() / op / "kernel.cu")),
                                    shapes=resolve_shapes(spec, "quick+edge"), dtypes=["bfloat16", "float32"],
                                    time=True, timeout_s=900))

    with ThreadPoolExecutor(len(HONEST)) as pool:  # each claims its share of the GPU's memory
        results = dict(zip(HONEST, pool.map(one, HONEST)))
    for op, result in results.items():
        assert result.ok, f"{op}: {result.reason}"
        assert all(s.correct is not False for s in result.shapes if s.covered)
        assert all(s.candidate and s.eager_candidate_us for s in result.shapes if s.covered and s.correct)


@pytest.mark.parametrize("op", ["silu_and_mul", "fused_add_rmsnorm"])
def test_shipped_kernels_are_timed_in_place_beside_the_isolated_figure(op):
    spec = get_spec(op)
    shapes = [s for s in resolve_shapes(spec, "served") if s[0] in (1, 512)]
    result = evaluate(EvalRequest(kernel=op, candidate=KernelSource(path=str(patches_dir() / op / "kernel.cu")),
                                  shapes=shapes, dtypes=["bfloat16"], sandwich="served", timeout_s=600))
    assert result.ok, result.reason
    for row in result.shapes:
        placed = row.sandwich
        assert row.speedup and placed and placed.repeats >= 2 and placed.model == "llama-3-8b"
        assert placed.gemms_us.median_us > 0 and placed.candidate_us.median_us > placed.gemms_us.median_us * 0.9


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
