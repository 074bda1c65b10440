"""One evaluation inside the isolated child: build -> load -> check -> time, shape by shape.

Run as `python -m astra_sglang.harness.worker REQUEST.json RESULT.json`. Progress goes to
RESULT.json.progress (one JSON line per event) so the parent can say where a crash or hang happened.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from astra_sglang.harness.build import build_library
from astra_sglang.harness.records import BaselineFault, BuildInfo, EvalRequest, EvalResult, KernelSource, ShapeResult
from astra_sglang.kernels.variants import first_kernel
from astra_sglang.paths import templates_dir
from astra_sglang.specs.registry import get_spec


def default_baseline(kernel: str) -> KernelSource:
    """Our first kernel for the op; for an onboarded op, which has none, SGLang's op through its adapter."""
    spec = get_spec(kernel)
    if spec.onboard is not None and spec.onboard.call:
        return KernelSource(path=f"py:{spec.onboard.call}")
    path, defines = first_kernel(kernel)
    return KernelSource(path=str(path), defines=defines)


class Progress:
    def __init__(self, path: Path | None):
        self.path = path

    def __call__(self, **event) -> None:
        if self.path:
            with self.path.open("a") as f:
                f.write(json.dumps(event, default=str) + "\n")


def evaluate_here(req: EvalRequest, progress: Progress = Progress(None)) -> EvalResult:
    start = time.perf_counter()
    spec = get_spec(req.kernel)
    baseline = req.baseline or default_baseline(req.kernel)
    result = EvalResult(kernel=req.kernel, candidate=req.candidate.name(), baseline=req.baseline_name(), l2=req.l2)
    progress(stage="build", what="candidate")
    mark = start
    result.build = (BuildInfo(ok=True, library=req.candidate.path) if req.candidate.is_python
                    else build_library(req.candidate.path, req.candidate.defines, req.arch))
    if not result.build.ok:
        result.reason = "build failed: " + _first_error(result.build.log)
        return _done(result, start)
    if (req.check or req.time) and not baseline.is_python:
        progress(stage="build", what="baseline")
        result.baseline_build = build_library(baseline.path, baseline.defines, req.arch)
        if not result.baseline_build.ok:
            result.reason = "baseline build failed: " + _first_error(result.baseline_build.log)
            return _done(result, start)
    mark = _phase(result, "build", mark)
    if req.compile_only:
        result.ok, result.stage = True, "done"
        return _done(result, start)

    import torch  # only the GPU path needs CUDA

    from astra_sglang.harness.gpu_eval import GpuSession

    if not torch.cuda.is_available():
        result.reason = "no CUDA GPU: checking and timing need one (builds succeeded)"
        return _done(result, start)
    result.stage = "load"
    probes = build_library(templates_dir() / "probes.cu", {}, req.arch)
    base = baseline.path if baseline.is_python else result.baseline_build.library
    session = GpuSession(spec, result.build.library, base, probes.library, req)
    result.gpu, result.roofline_gbps, result.empty_kernel_us = session.gpu, session.roofline, session.empty_us
    result.matmul_tflops = session.tflops
    # the session's facts, so that a result the parent rebuilds after a timeout or crash still says where it ran
    progress(stage="loaded", gpu=session.gpu, roofline_gbps=session.roofline, empty_kernel_us=session.empty_us,
             matmul_tflops=session.tflops)
    mark = _phase(result, "load", mark)
    all_ok = True
    done = {(tuple(r.shape), r.dtype): r for r in req.done}
    for dtype in req.dtypes:
        for shape in req.shapes:
            if (tuple(shape), dtype) in done:  # finished by an earlier child (see isolate.evaluate)
                result.shapes.append(done[(tuple(shape), dtype)])
                all_ok &= result.shapes[-1].correct is not False
                continue
            if not spec.supports(shape):
                result.shapes.append(ShapeResult(shape=shape, dtype=dtype, reason="outside the spec's constraints"))
                continue
            progress(stage="check", shape=shape, dtype=dtype)
            result.stage = "check"
            try:
                row = session.evaluate_shape(shape, dtype, progress)
            except RuntimeError as exc:  # a CUDA fault poisons the context: report it and stop here
                reason = _cuda_reason(exc)
                if reason.startswith(BASELINE_BLAME):  # not the candidate's fault: the parent re-runs without it
                    result.stage, result.reason = "baseline_crash", reason
                    result.baseline_fault = BaselineFault(shape=shape, dtype=dtype, reason=reason)
                    return _done(result, start)
                row = ShapeResult(shape=shape, dtype=dtype, correct=False, reason=reason)
                result.shapes.append(row)
                result.ok, result.stage, result.reason = False, "crash", f"at {shape} {dtype}: {row.reason}"
                return _done(result, start)
            result.shapes.append(row)
            progress(stage="shape_done", row=row.model_dump(mode="json"), done=len(result.shapes))
            all_ok &= row.correct is not False
    session.close()
    _phase(result, "shapes", mark)
    result.ok = all_ok
    result.stage = "done"
    if not all_ok:
        bad = next(s for s in result.shapes if s.correct is False)
        result.reason = f"incorrect at {bad.shape} {bad.dtype}: {bad.reason}"
    elif req.time and (empty := uncompared(result.shapes)):
        result.ok, result.reason = False, empty
    return _done(result, start)


def uncompared(shapes: list[ShapeResult]) -> str:
    """Why a timed evaluation compared nothing: the candidate has times, but the baseline gave none at any of those
    shapes (it refused or faulted at each); "" where at least one shape has a speedup, or none was timed. A table of candidate times alone is no result against a baseline."""
    timed = [s for s in shapes if s.candidate is not None]
    if not timed or any(s.speedup is not None for s in timed):
        return ""
    first = next((s for s in timed if s.baseline_defect), timed[0])
    why = first.baseline_defect or "no baseline time"
    return (f"nothing compared: the baseline gave no time at any of the {len(timed)} timed shapes "
            f"({'x'.join(map(str, first.shape))} {first.dtype}: {why})")


BASELINE_BLAME = "in the baseline:"
"""timing.blame's prefix for a fault raised by the baseline's launches (check, capture, replay or eager timing)."""


def _cuda_reason(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]


def _first_error(log: str) -> str:
    lines = [ln.strip() for ln in log.splitlines() if "error" in ln.lower()]
    return (lines[0] if lines else (log.strip().splitlines() or ["(no compiler output)"])[-1])[:300]


def _phase(result: EvalResult, name: str, since: float) -> float:
    """Records the seconds since `since` as phase `name`; returns now."""
    now = time.perf_counter()
    result.phases[name] = round(now - since, 3)
    return now


def _done(result: EvalResult, start: float) -> EvalResult:
    result.wall_s = time.perf_counter() - start
    return result


def main(argv: list[str]) -> int:
    request_path, result_path = Path(argv[0]), Path(argv[1])
    req = EvalRequest.model_validate_json(request_path.read_text())
    progress = Progress(result_path.with_name(result_path.name + ".progress"))
    result = evaluate_here(req, progress)
    result_path.write_text(result.model_dump_json())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
