"""Harness pieces that need no GPU: comparisons, builds (nvcc), isolation, the CLI without a GPU."""
import re
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from astra_sglang.cli import main
from astra_sglang.harness.build import build_library, parse_ptxas
from astra_sglang.harness import draw, prestate
from astra_sglang.harness.compare import compare, error_ratio
from astra_sglang.harness.inputs import allocate, fill
from astra_sglang.harness.isolate import evaluate
from astra_sglang.harness.records import EvalRequest, KernelSource
from astra_sglang.paths import kernels_dir
from astra_sglang.specs.registry import get_spec

FIXTURES = Path(__file__).parent / "fixtures"


def _silu_case(shape=(4, 8), dtype="bfloat16"):
    spec = get_spec("silu_and_mul")
    args = fill(spec, allocate(spec, shape, dtype, "cpu"), torch.Generator().manual_seed(1))
    ref = args.upcast()
    spec.reference_fn()(*ref.call_args(spec))
    return spec, args, ref


def test_error_ratio_treats_equal_infinities_as_exact_and_nan_as_failure():
    out = torch.tensor([float("inf"), float("nan"), 1.0])
    ref = torch.tensor([float("inf"), 1.0, 1.0])
    ratio = error_ratio(out, ref, 1e-3, 1e-3)
    assert ratio[0] == 0 and torch.isinf(ratio[1]) and ratio[2] == 0


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("fraction, reason", [(1.0, "out: never written"),
                                              (0.5, "out: 16 of 32 elements left unwritten (still the NaN poison)")])
def test_unwritten_output_is_named(dtype, fraction, reason):
    spec, args, ref = _silu_case(dtype=dtype)
    args.tensors[1].copy_(ref.tensors[1])
    draw.poison(args.tensors[1][:int(args.tensors[1].shape[0] * fraction)])
    verdict = compare(spec, dtype, args, ref)
    assert not verdict.ok and verdict.reason == reason


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_a_nan_the_kernel_computed_is_not_called_unwritten(dtype):
    spec, args, ref = _silu_case(dtype=dtype)
    args.tensors[1].copy_(ref.tensors[1])
    args.tensors[1][1:3] = torch.rsqrt(torch.zeros(2, 1)) * 0.0  # inf * 0: a NaN of the hardware's own pattern
    verdict = compare(spec, dtype, args, ref)
    assert not verdict.ok and verdict.reason.startswith("out: computed NaN at 16 of 32 elements"), verdict.reason


def test_unwritten_is_told_by_what_the_buffer_held_before_the_call():
    spec, args, ref = _silu_case()
    prestate.prepare(spec, args.tensors, "finite", torch.Generator().manual_seed(2))
    before = prestate.snapshot(spec, args.tensors)
    args.tensors[1][2:].copy_(ref.tensors[1][2:])  # rows 0-1 never written: random finite values stay
    verdict = compare(spec, "bfloat16", args, ref, before=before, held=prestate.HELD["finite"])
    # (a random value that happens to lie within the tolerance of the true one is not a failure)
    assert not verdict.ok and re.fullmatch(r"out: 1[0-6] of 32 elements left unwritten \(still the random "
                                           r"values put there\)", verdict.reason), verdict.reason
    assert "wrong values" in compare(spec, "bfloat16", args, ref).reason  # without the snapshot: just wrong


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_wrong_values_a_few_of_which_equal_the_old_ones_are_not_called_unwritten(dtype):
    """An in-place result computed from other inputs (a set called twice) is wrong nearly everywhere; the few
    elements that happen to equal what they held are named, but the failure is wrong values."""
    spec, args, ref = _silu_case((8, 64), dtype=dtype)
    prestate.prepare(spec, args.tensors, "finite", torch.Generator().manual_seed(3))
    before = prestate.snapshot(spec, args.tensors)
    args.tensors[1].copy_(ref.tensors[1] * 3.0 + 1.0)
    args.tensors[1][0, :3] = before[1][0, :3]
    verdict = compare(spec, dtype, args, ref, before=before, held=prestate.HELD["finite"])
    assert not verdict.ok and "wrong values" in verdict.reason and verdict.reason.endswith(
        " (3 of them still what they held before the call)"), verdict.reason


def test_correct_output_passes_and_rounding_is_within_tolerance():
    spec, args, ref = _silu_case((64, 512))
    args.tensors[1].copy_(ref.tensors[1])  # one bf16 rounding
    verdict = compare(spec, "bfloat16", args, ref)
    assert verdict.ok and 0 < verdict.err_ratio < 1


def test_low_precision_and_wrong_values_are_told_apart():
    spec, args, ref = _silu_case((64, 512))
    x = ref.tensors[1]
    args.tensors[1].copy_(x.to(torch.float8_e4m3fn).double())  # 3 mantissa bits
    verdict = compare(spec, "bfloat16", args, ref)
    assert not verdict.ok and "too imprecise" in verdict.reason
    args.tensors[1].copy_(-x)
    verdict = compare(spec, "bfloat16", args, ref)
    assert not verdict.ok and "wrong values" in verdict.reason


def test_ptxas_report_is_parsed():
    log = ("ptxas info    : Used 40 registers, used 1 barriers\n"
           "ptxas info    : Function properties for k\n    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n"
           "ptxas info    : Used 18 registers\n")
    assert parse_ptxas(log) == (40, 8)


@pytest.mark.nvcc
def test_build_is_cached_and_a_failing_build_reports_the_error(tmp_path, monkeypatch):
    monkeypatch.setenv("ASTRA_SGLANG_CACHE", str(tmp_path))
    first = build_library(kernels_dir() / "silu_and_mul.cu", arch="sm_90")
    assert first.ok and not first.cached and first.registers
    again = build_library(kernels_dir() / "silu_and_mul.cu", arch="sm_90")
    assert again.ok and again.cached and again.library == first.library
    knob = build_library(kernels_dir() / "silu_and_mul.cu", {"ASTRA_UNUSED_KNOB": "1"}, arch="sm_90")
    assert knob.library != first.library
    broken = build_library(FIXTURES / "faults" / "broken.cu", arch="sm_90")
    assert not broken.ok and "this_name_does_not_exist" in broken.log


@pytest.mark.nvcc
def test_isolated_compile_only_evaluation(tmp_path, monkeypatch):
    monkeypatch.setenv("ASTRA_SGLANG_CACHE", str(tmp_path))
    ok = evaluate(EvalRequest(kernel="silu_and_mul", candidate=KernelSource(path=str(kernels_dir() / "silu_and_mul.cu")),
                              shapes=[(1, 8)], dtypes=["bfloat16"], compile_only=True, arch="sm_90"))
    assert ok.ok and ok.build.ok and ok.baseline_build.ok
    # where the wall went: the child's start and imports, then its builds (nothing timed: no load or shapes)
    assert list(ok.phases) == ["process", "build"] and ok.phases["process"] > 0
    assert sum(ok.phases.values()) <= ok.wall_s + 1e-3
    bad = evaluate(EvalRequest(kernel="silu_and_mul", candidate=KernelSource(path=str(FIXTURES / "faults" / "broken.cu")),
                               shapes=[(1, 8)], dtypes=["bfloat16"], compile_only=True, arch="sm_90"))
    assert not bad.ok and bad.reason.startswith("build failed:") and "this_name_does_not_exist" in bad.reason


def test_isolation_timeout_is_reported_not_raised():
    req = EvalRequest(kernel="silu_and_mul", candidate=KernelSource(path=str(kernels_dir() / "silu_and_mul.cu")),
                      shapes=[(1, 8)], dtypes=["bfloat16"], compile_only=True, timeout_s=0.05)
    result = evaluate(req)
    assert not result.ok and result.stage == "timeout" and "timed out after" in result.reason


CHILD_THAT_HANGS = """
import json, sys, time
from pathlib import Path
progress = Path(sys.argv[1] + ".progress")
row = {"shape": [1, 8], "dtype": "bfloat16", "correct": True, "speedup": 0.9,
       "candidate": {"median_us": 2.0, "p10_us": 2.0, "p90_us": 2.0}}
events = [{"stage": "loaded", "gpu": "NVIDIA H200", "roofline_gbps": 3935.0, "empty_kernel_us": 0.45,
           "matmul_tflops": None}, {"stage": "shape_done", "row": row, "done": 1}]
progress.write_text("".join(json.dumps(e) + "\\n" for e in events))
time.sleep(60)
"""


def test_a_timed_out_evaluation_keeps_its_labels_gpu_and_finished_rows(monkeypatch):
    """The H200 run whose timed-out rope evaluation printed "vs  on no GPU" and "during shape_done ()"."""
    import subprocess
    import sys

    from astra_sglang.harness import isolate
    from astra_sglang.harness.report import table

    popen = subprocess.Popen
    monkeypatch.setattr(isolate.subprocess, "Popen", lambda cmd, **kw: popen([sys.executable, "-c", CHILD_THAT_HANGS,
                                                                               cmd[-1]], **kw))
    req = EvalRequest(kernel="silu_and_mul", candidate=KernelSource(path="patches/silu_and_mul/kernel.cu",
                                                                    label="patches/silu_and_mul"),
                      baseline=KernelSource(path="py:sgl_kernel:silu_and_mul"), shapes=[(1, 8), (3, 16)],
                      dtypes=["bfloat16"], timeout_s=3)
    result = evaluate(req)
    assert not result.ok and result.stage == "timeout"
    assert result.reason == "timed out after 3s after shape (1, 8) bfloat16, 1 of 2 done"
    assert result.baseline == "py:sgl_kernel:silu_and_mul" and result.gpu == "NVIDIA H200"
    assert result.roofline_gbps == 3935.0 and [s.speedup for s in result.shapes] == [0.9]
    assert "vs py:sgl_kernel:silu_and_mul on NVIDIA H200 | SM-copy roofline 3935 GB/s" in table(result).title


def test_cli_kernels_lists_every_spec():
    out = CliRunner().invoke(main, ["kernels"])
    assert out.exit_code == 0
    for op in ("silu_and_mul", "fused_add_rmsnorm", "rmsnorm", "merge_attn_states_lse"):
        assert op in out.output


@pytest.mark.parametrize("args, message", [
    (["bench", "nope"], "unknown kernel 'nope'"),
    (["bench", "silu_and_mul", "--dtypes", "int3"], "unknown dtype"),
    (["bench", "silu_and_mul", "--shapes", "16x"], "bad shape"),
])
def test_cli_bad_input_is_one_line_and_nonzero(args, message):
    out = CliRunner().invoke(main, args)
    assert out.exit_code == 1 and message in out.output and len(out.output.strip().splitlines()) == 1


@pytest.mark.nvcc
def test_cli_bench_without_gpu_builds_then_says_so(tmp_path, monkeypatch):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    monkeypatch.setenv("ASTRA_SGLANG_CACHE", str(tmp_path))
    out = CliRunner().invoke(main, ["bench", "silu_and_mul", "--shapes", "1x8"])
    assert out.exit_code == 1
    assert "no CUDA GPU here: candidate and baseline built" in out.output
    assert len(out.output.strip().splitlines()) == 1


@pytest.mark.nvcc
def test_evaluate_many_builds_everything_first_then_evaluates_in_order(tmp_path, monkeypatch):
    from astra_sglang.harness.isolate import evaluate_many

    monkeypatch.setenv("ASTRA_SGLANG_CACHE", str(tmp_path))
    sources = [kernels_dir() / "silu_and_mul.cu", FIXTURES / "honest" / "silu_and_mul_vec.cu"]
    reqs = [EvalRequest(kernel="silu_and_mul", candidate=KernelSource(path=str(s)), shapes=[(1, 8)],
                        dtypes=["bfloat16"], compile_only=True, arch="sm_90") for s in sources]
    seen = []

    def evaluator(req):  # by now every candidate must already be in the build cache
        seen.append(build_library(req.candidate.path, arch="sm_90").cached)
        return evaluate(req)

    results = evaluate_many(reqs, evaluator)
    assert seen == [True, True] and [r.candidate for r in results] == [s.name for s in sources]


def test_a_baseline_crash_reruns_the_rest_with_the_done_rows_kept(monkeypatch):
    from astra_sglang.harness import isolate
    from astra_sglang.harness.records import BaselineFault, EvalResult, ShapeResult

    shapes = [(4, 64), (5, 4100), (3, 128)]
    seen = []

    def child(req, workdir):  # stands in for one isolated worker process
        seen.append(req)
        rows = list(req.done)
        for shape in shapes[len(rows):]:
            if shape == (5, 4100) and not req.baseline_faults:
                return EvalResult(kernel=req.kernel, candidate="c", stage="baseline_crash", shapes=rows,
                                  reason="in the baseline: CUDA error: misaligned address",
                                  baseline_fault=BaselineFault(shape=shape, dtype="bfloat16",
                                                               reason="in the baseline: misaligned address"))
            rows.append(ShapeResult(shape=shape, dtype="bfloat16", correct=True))
        return EvalResult(kernel=req.kernel, candidate="c", ok=True, stage="done", shapes=rows)

    monkeypatch.setattr(isolate, "_evaluate_once", child)
    result = evaluate(EvalRequest(kernel="silu_and_mul", candidate=KernelSource(path="x.cu"), shapes=shapes,
                                  dtypes=["bfloat16"]))
    assert result.ok and [tuple(s.shape) for s in result.shapes] == shapes
    assert len(seen) == 2
    assert [tuple(f.shape) for f in seen[1].baseline_faults] == [(5, 4100)]
    assert [tuple(r.shape) for r in seen[1].done] == [(4, 64)]


def test_a_baseline_that_keeps_crashing_ends_the_evaluation(monkeypatch):
    from astra_sglang.harness import isolate
    from astra_sglang.harness.records import BaselineFault, EvalResult

    def child(req, workdir):
        return EvalResult(kernel=req.kernel, candidate="c", stage="baseline_crash", reason="in the baseline: boom",
                          baseline_fault=BaselineFault(shape=(1, 8), dtype="bfloat16", reason="boom"))

    monkeypatch.setattr(isolate, "_evaluate_once", child)
    result = evaluate(EvalRequest(kernel="silu_and_mul", candidate=KernelSource(path="x.cu"), shapes=[(1, 8)],
                                  dtypes=["bfloat16"]))
    assert not result.ok and result.stage == "crash" and "crashed more than" in result.reason


def test_cli_bench_l2_mode_reaches_the_request_and_the_rows(tmp_path, monkeypatch):
    import astra_sglang.harness.isolate as isolate
    from astra_sglang.harness.records import BuildInfo, EvalResult, ShapeResult
    from astra_sglang.harness.report import write_jsonl

    seen = []

    def fake_evaluate(req):
        seen.append(req)
        return EvalResult(kernel=req.kernel, candidate="c", ok=True, build=BuildInfo(ok=True), l2=req.l2)

    monkeypatch.setattr(isolate, "evaluate", fake_evaluate)
    monkeypatch.setattr("astra_sglang.cli.bench._has_gpu", lambda: False)
    out = CliRunner().invoke(main, ["bench", "silu_and_mul", "--shapes", "1x8", "--l2", "hot"])
    assert out.exit_code == 1 and "no CUDA GPU here" in out.output
    assert seen[0].l2 == "hot" and seen[0].sandwich == "off"
    CliRunner().invoke(main, ["bench", "rmsnorm", "--shapes", "served", "--sandwich"])
    assert seen[1].sandwich == "any" and [s[0] for s in seen[1].shapes] == [1, 8, 32, 128, 512, 2048, 8192, 16384]
    assert CliRunner().invoke(main, ["bench", "silu_and_mul", "--l2", "warm"]).exit_code == 2
    write_jsonl(EvalResult(kernel="silu_and_mul", candidate="c", l2="hot",
                           shapes=[ShapeResult(shape=(1, 8), dtype="bfloat16")]), tmp_path / "r.jsonl")
    assert '"l2": "hot"' in (tmp_path / "r.jsonl").read_text().splitlines()[0]


def test_blame_names_the_side_once():
    from astra_sglang.harness.timing import blame

    def fault():
        raise RuntimeError("CUDA error: misaligned address\nCUDA kernel errors might be reported later")

    with pytest.raises(RuntimeError, match=r"^in the baseline: CUDA error: misaligned address$"):
        blame("baseline", fault)
    # The timing step as a whole is blamed generically, but a side named inside it keeps its name.
    with pytest.raises(RuntimeError, match=r"^in the baseline: CUDA error"):
        blame("timing", lambda: blame("baseline", fault))
    assert blame("candidate", lambda: 3) == 3


def test_timing_rounds_record_only_after_the_warmup_rounds_and_seconds():
    from astra_sglang.harness.timing import rounds

    now = [0.0]
    calls = []

    def fn(name):
        def replay(_round):
            calls.append(name)
            now[0] += 0.05  # each replay takes 50 ms of the fake clock
            return now[0]
        return replay

    out = rounds({"a": fn("a"), "b": fn("b")}, replays=3, warmup=1, warmup_s=0.29, clock=lambda: now[0])
    # 0.29 s of warm-up takes 3 rounds of 0.1 s (more than the 1 round asked); then 3 recorded rounds
    assert len(calls) == 12 and calls[:4] == ["a", "b", "b", "a"]
    assert out["b"] == [pytest.approx(t) for t in (0.35, 0.50, 0.55)]  # round 3 is odd: b first
    assert out["a"] == [pytest.approx(t) for t in (0.40, 0.45, 0.60)]
    calls.clear()
    assert len(rounds({"a": fn("a")}, replays=2, warmup=3, warmup_s=0.0, clock=lambda: now[0])["a"]) == 2
    assert len(calls) == 5  # the 3 warm-up rounds still run when no seconds are asked for


def test_rounds_hand_every_replay_its_round():
    from astra_sglang.harness.timing import rounds

    seen = []
    rounds({"a": lambda r: seen.append(r) or 1.0}, replays=2, warmup=1, warmup_s=0.0)
    assert seen == [0, 1, 2]


def test_launch_count_ignores_one_slow_probe_replay():
    from astra_sglang.harness.timing import MIN_REPLAY_US, launch_count

    # A 1-launch probe of the empty kernel: ~2.5 us a replay (graph launch included), one hiccup of 50 us.
    assert launch_count([2.5, 50.0, 2.6, 2.5, 2.7], sets=1) == int(-(-MIN_REPLAY_US // 2.5))
    assert launch_count([50.0] * 5, sets=1) == int(-(-MIN_REPLAY_US // 50.0))  # slow every time: believed
    assert launch_count([0.1] * 5, sets=1) == int(-(-MIN_REPLAY_US // 0.5))  # per launch at least 0.5 us
    assert launch_count([1e5] * 5, sets=64) == 64  # every input set at least once
