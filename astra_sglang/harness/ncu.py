"""Nsight Compute facts about one candidate at one shape, for the ProfilingAgent.

ncu runs `python -m astra_sglang.harness.ncu` on a request file: the driver loads the kernel library,
makes a shape's arguments and launches once inside an NVTX range that ncu filters on, so the
tensor-filling kernels around it are not profiled. Sections, not raw metric names, are asked for:
their metric names change less between ncu versions. `--clock-control none` leaves the card's clocks
as they are. Where ncu is missing or fails, the profile is empty and the loop goes on without it.

Several shapes of one library can share one ncu process (`profile_many`: Python and torch start-up cost
seconds per process); harness/ncu_csv.py attributes the profiled kernels to shapes.
"""
from __future__ import annotations

import logging
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from pydantic import BaseModel, Field, model_validator

from astra_sglang.harness.ncu_csv import NVTX_RANGE, attribute, parse_ncu_csv, parse_ncu_launches, shape_range
from astra_sglang.harness.records import EvalResult, ShapeResult

SECTIONS = ("SpeedOfLight", "Occupancy", "LaunchStats", "WarpStateStats", "MemoryWorkloadAnalysis")
# Where a warp's cycles between two issued instructions go, per stall reason (sum over reasons = the section's
# Warp Cycles Per Issued Instruction). A latency-bound norm row splits into its loads (long scoreboard), its
# reduction's shuffles and shared-memory reads (short scoreboard), its barriers and fixed-latency math (wait).
STALL_REASONS = ("long_scoreboard", "short_scoreboard", "barrier", "wait")
STALL_METRICS = tuple(f"smsp__average_warps_issue_stalled_{r}_per_issue_active.ratio" for r in STALL_REASONS)
TIMEOUT_S = 180
PER_SHAPE_S = 30  # extra allowance per further shape in one process (its replay passes, not a start-up)

log = logging.getLogger("astra_sglang.harness.ncu")


class ProfileFacts(BaseModel):
    """Hardware facts about one evaluated kernel, beyond what EvalResult carries."""

    ncu: dict[str, float] = Field(default_factory=dict)
    """Nsight Compute metrics (name -> value), when a profiler is available."""
    registers: int | None = None
    spill_bytes: int | None = None


class ProfileRequest(BaseModel):
    kernel: str
    library: str
    """A built kernel library, or "py:MODULE:FUNC" (SGLang's own op, profiled the same way)."""
    shape: tuple[int, ...] | None = None
    """One shape: the agent loop's path."""
    shapes: list[tuple[int, ...]] = []
    """Several shapes in one process, launched in this order (`profile_many`)."""
    dtype: str

    @model_validator(mode="after")
    def _one_way(self):
        if (self.shape is None) == (not self.shapes):
            raise ValueError("give exactly one of shape and shapes")
        return self

    def all_shapes(self) -> list[tuple[int, ...]]:
        return list(self.shapes) if self.shapes else [self.shape]


class DriveReport(BaseModel):
    """What the driver launched, written beside the request: ncu's CSV cannot say that a shape was refused."""
    codes: list[int]
    """Per shape, in order: the launch's ABI code (0 launched; -1 the op refused the shape; >0 CUDA error)."""


def report_path(request: Path) -> Path:
    return request.with_name(request.stem + ".launched.json")


def pick_shape(result: EvalResult) -> ShapeResult | None:
    """The timed shape furthest from the roofline: where the profile says most about the gap."""
    timed = [s for s in result.shapes if s.pct_roofline is not None]
    prefer = [s for s in timed if s.dtype == "bfloat16"] or timed
    return min(prefer, key=lambda s: s.pct_roofline) if prefer else None


class NcuProfiler:
    """The agent loop's Profiler: (candidate source, its EvalResult) -> ProfileFacts."""

    def __init__(self, kernel: str, ncu: str | None = None):
        self.kernel = kernel
        self.ncu = ncu or shutil.which("ncu") or (shutil.which("/usr/local/cuda/bin/ncu"))

    @classmethod
    def available(cls) -> bool:
        return bool(shutil.which("ncu") or shutil.which("/usr/local/cuda/bin/ncu"))

    def command(self, request_path: Path) -> list[str]:
        sections = [arg for s in SECTIONS for arg in ("--section", s)]
        return [self.ncu, "--csv", "--page", "details", "--nvtx", "--nvtx-include", f"{NVTX_RANGE}/",
                "--clock-control", "none", "--target-processes", "all", *sections, "--metrics", ",".join(STALL_METRICS),
                sys.executable, "-m", "astra_sglang.harness.ncu", str(request_path)]

    def _run(self, request: Path, timeout_s: float) -> subprocess.CompletedProcess | None:
        try:
            return subprocess.run(self.command(request), capture_output=True, text=True, timeout=timeout_s,
                                  cwd=request.parent)
        except subprocess.TimeoutExpired:
            return None

    def profile(self, library: str, shape: tuple[int, ...], dtype: str) -> dict[str, float]:
        """ncu section facts of one launch (L2 flushed first: ncu's default cache control); {} on failure."""
        if not self.ncu:
            return {}
        with tempfile.TemporaryDirectory(prefix="astra-ncu-") as tmp:
            request = Path(tmp) / "request.json"
            request.write_text(ProfileRequest(kernel=self.kernel, library=library, shape=shape,
                                              dtype=dtype).model_dump_json())
            proc = self._run(request, TIMEOUT_S)
        return parse_ncu_csv(proc.stdout) if proc else {}

    def profile_many(self, library: str, shapes: list[tuple[int, ...]], dtype: str) -> list[dict[str, float]]:
        """`profile` for several shapes in one ncu process: per shape, in order, the facts of its launch
        ({} where it was refused, failed, or could not be attributed: the reason is logged)."""
        shapes = [tuple(s) for s in shapes]
        if not self.ncu or not shapes:
            return [{} for _ in shapes]
        with tempfile.TemporaryDirectory(prefix="astra-ncu-") as tmp:
            request = Path(tmp) / "request.json"
            request.write_text(ProfileRequest(kernel=self.kernel, library=library, shapes=shapes,
                                              dtype=dtype).model_dump_json())
            proc = self._run(request, TIMEOUT_S + PER_SHAPE_S * (len(shapes) - 1))
            report = report_path(request)
            codes = DriveReport.model_validate_json(report.read_text()).codes if report.exists() else None
        if proc is None:
            log.warning("ncu timed out profiling %s (%d shapes)", library, len(shapes))
            return [{} for _ in shapes]
        per_shape, problem = attribute(parse_ncu_launches(proc.stdout), len(shapes), codes)
        if problem:
            # ncu's own "==PROF=="/"==ERROR==" lines and the driver's stderr say why; the CSV rows do not
            said = [line for line in proc.stdout.splitlines() if line.startswith("==")] + proc.stderr.splitlines()
            log.warning("ncu %s (%s): %s; launch codes %s; ncu said: %s", self.kernel, library, problem, codes,
                        " | ".join(said[-6:]))
        return per_shape

    def __call__(self, source: str, result: EvalResult):
        facts = ProfileFacts(registers=result.build.registers if result.build else None,
                             spill_bytes=result.build.spill_bytes if result.build else None)
        shape = pick_shape(result)
        if not self.ncu or shape is None or not (result.build and result.build.library):
            return facts
        measured = self.profile(result.build.library, shape.shape, shape.dtype)
        if measured:
            measured["profiled shape " + "x".join(map(str, shape.shape)) + " " + shape.dtype] = 1.0
        return facts.model_copy(update={"ncu": measured})


def _drive(request_path: str) -> None:
    """Inside ncu: per shape, in order, one launch of the candidate inside the NVTX ranges ncu filters on
    (outer) and attributes by (inner)."""
    import torch

    from astra_sglang.harness.abi import KernelLibrary, Launcher
    from astra_sglang.harness.inputs import allocate, fill
    from astra_sglang.specs.registry import get_spec

    req = ProfileRequest.model_validate_json(Path(request_path).read_text())
    spec = get_spec(req.kernel)
    if req.library.startswith("py:"):
        from astra_sglang.harness.gpu_eval import python_op

        launcher = python_op(spec, req.library)
    else:
        launcher = Launcher(KernelLibrary(req.library), len(spec.tensor_args), len(spec.scalar_args))
    codes = []
    for index, shape in enumerate(req.all_shapes()):
        # A fresh seed per shape: a shape's inputs do not depend on which shapes share the process.
        args = fill(spec, allocate(spec, shape, req.dtype, "cuda"), torch.Generator("cuda").manual_seed(0))
        launcher(args.tensors, args.scalars)  # module load, descriptors, first touch: outside the range
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push(NVTX_RANGE)
        torch.cuda.nvtx.range_push(shape_range(index))
        codes.append(int(launcher(args.tensors, args.scalars)))
        torch.cuda.nvtx.range_pop()
        torch.cuda.nvtx.range_pop()
        torch.cuda.synchronize()
        del args
    report_path(Path(request_path)).write_text(DriveReport(codes=codes).model_dump_json())


if __name__ == "__main__":
    _drive(sys.argv[1])
