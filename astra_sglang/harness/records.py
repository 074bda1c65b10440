"""Typed records passed between the harness stages, the isolated worker and its callers (CLI, agents)."""
from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, Field

Stage = Literal["build", "load", "check", "time", "done", "crash", "baseline_crash", "timeout"]


class KernelSource(BaseModel):
    """A kernel source file exposing the C ABI, plus compile-time knobs (-D) the tuner may set.

    A path "py:MODULE:FUNCTION" names a Python callable instead (SGLang's own op, a peer such as Liger, a
    Triton kernel's wrapper), called with the spec's arguments in order: never built, checked and timed like
    a library (the same trials, guard regions, timed-output check and physics bound).
    """

    path: str
    label: str = ""
    defines: dict[str, str] = Field(default_factory=dict)

    def name(self) -> str:
        return self.label or (self.path if self.is_python else self.path.rsplit("/", 1)[-1])

    @property
    def is_python(self) -> bool:
        return self.path.startswith("py:")


class EvalRequest(BaseModel):
    """One evaluation: build a candidate (and a baseline), check and time it on shapes x dtypes."""

    kernel: str
    candidate: KernelSource
    baseline: KernelSource | None = None
    """None = our own first kernel for this op."""
    shapes: list[tuple[int, ...]]
    dtypes: list[str]
    check: bool = True
    time: bool = True
    compile_only: bool = False
    """CPU machines: build only (nvcc), no launch."""
    trials: int = 3
    """Correctness trials per shape, each with fresh random inputs."""
    edge_cases: bool = True
    arch: str | None = None
    """e.g. "sm_90"; None = the current GPU's (sm_90 without a GPU)."""
    seed: int = 0
    timeout_s: float = 600.0
    l2: Literal["cold", "hot"] = "cold"
    """Timing: "cold" gives every launch its own argument set and empties the L2 before every replay (DESIGN.md's
    rule); "hot" replays one input set,
    as in serving where the producer kernel just wrote it (e.g. silu_and_mul after the gate/up GEMM)."""
    sandwich: Literal["off", "served", "any"] = "off"
    """Also time correct shapes between the GEMMs they have in the model (harness/sandwich.py), where the spec
    names them: "served", the shapes of the `served` set (the acceptance gate's figure); "any", every shape a
    model config matches. `ShapeResult.sandwich`."""
    baseline_faults: list["BaselineFault"] = Field(default_factory=list)
    """Shapes where the baseline crashed an earlier child's CUDA context: checked against the reference only."""
    done: list["ShapeResult"] = Field(default_factory=list)
    """Rows an earlier child already finished (kept as they are, not re-run)."""

    def baseline_name(self) -> str:
        """The baseline's label in the result: its source's, or "ours:OP" for our own first kernel."""
        return self.baseline.name() if self.baseline else "ours:" + self.kernel


class BaselineFault(BaseModel):
    """The original op faulted here (e.g. sgl_kernel's misaligned 16-byte loads at an odd width)."""

    shape: tuple[int, ...]
    dtype: str
    reason: str


class BuildInfo(BaseModel):
    ok: bool
    seconds: float = 0.0
    cached: bool = False
    library: str = ""
    registers: int | None = None
    spill_bytes: int | None = None
    log: str = ""


class Timing(BaseModel):
    """Per-launch kernel time from graph replays (us): median over replays and the p10-p90 spread."""

    median_us: float
    p10_us: float
    p90_us: float


class SandwichTiming(BaseModel):
    """The op timed where it runs in the model: GEMM -> op -> GEMM in one CUDA graph (harness/sandwich.py)."""

    model: str
    before: str
    """The GEMM before the op (it writes the op's input), e.g. "down_proj 64x14336x4096" (m x k x n)."""
    after: str
    repeats: int
    """GEMM -> op -> GEMM per replay, each over its own argument set."""
    gemms_us: Timing
    """Both GEMMs alone, per repeat (the third graph of the run)."""
    candidate_us: Timing
    baseline_us: Timing
    """The whole sandwich, per repeat, with the candidate's and the baseline's op."""
    op_candidate_us: float
    op_baseline_us: float
    """The op's share: the sandwich minus the GEMMs alone, medians of the per-round differences."""
    speedup: float | None
    """Median over rounds of the baseline's share over the candidate's (None: more than
    sandwich.UNRESOLVED_ROUNDS of the rounds left either share not positive, the GEMMs' spread swallowing the op)."""
    saved_us: float
    """Median over rounds of the baseline's sandwich minus the candidate's: the time a call saves in place."""


class ShapeResult(BaseModel):
    shape: tuple[int, ...]
    dtype: str
    correct: bool | None = None
    """None: not checked, or not covered (see `covered`)."""
    covered: bool = True
    """False: the kernel declined this shape (ASTRA_UNSUPPORTED); the original op serves it in SGLang."""
    reason: str = ""
    max_err_ratio: float | None = None
    """Worst |out - ref| / (atol + rtol |ref|) over all outputs and trials: <= 1 passes."""
    err_rms: float | None = None
    baseline_err_rms: float | None = None
    """RMS of that ratio over the trials with ordinary random inputs, the candidate's and the original's on
    the same inputs: the candidate may be at most limits.PRECISION_MULTIPLE times less precise."""
    baseline_defect: str = ""
    """Where the baseline itself disagrees with the reference (e.g. NaN on both-LSE -inf)."""
    min_bytes: int = 0
    flops: int = 0
    """Fewest FLOPs of a call (the spec's cost model; 0 where it counts none)."""
    candidate: Timing | None = None
    baseline: Timing | None = None
    launches: int | None = None
    """Launches of the first timed graph, each on its own argument set (the second graph has one more): a replay's
    time over them is a sample, so fewer launches leave more of the replay's own cost in each."""
    speedup: float | None = None
    """Median of per-replay ratios baseline/candidate (interleaved replays)."""
    gbps: float | None = None
    pct_roofline: float | None = None
    floor_us: float | None = None
    """max(bytes / roofline, FLOPs / matmul rate, empty-kernel time): no version runs much faster."""
    tflops: float | None = None
    """Achieved TFLOP/s (FLOPs / candidate time) where the cost model counts FLOPs."""
    eager_candidate_us: float | None = None
    eager_baseline_us: float | None = None
    """Per call with Python dispatch (ctypes launch, no graph), host-timed."""
    sandwich: SandwichTiming | None = None
    """The op timed between its model neighbours (EvalRequest.sandwich); where measured, scoring uses its
    speedup (EvalResult.scored)."""


class EvalResult(BaseModel):
    kernel: str
    candidate: str
    baseline: str = ""
    ok: bool = False
    stage: Stage = "build"
    reason: str = ""
    build: BuildInfo | None = None
    baseline_build: BuildInfo | None = None
    shapes: list[ShapeResult] = Field(default_factory=list)
    gpu: str = ""
    roofline_gbps: float | None = None
    empty_kernel_us: float | None = None
    matmul_tflops: float | None = None
    """The dense matmul rate measured in this run, where the spec's cost model counts FLOPs."""
    l2: Literal["cold", "hot"] = "cold"
    """The request's timing mode (EvalRequest.l2)."""
    wall_s: float = 0.0
    phases: dict[str, float] = Field(default_factory=dict)
    """Seconds of the evaluation's parts: `process` (the child's start and imports, as the parent saw it), `build`,
    `load` (CUDA, the roofline and matmul probes), `shapes` (checking and timing every shape): where a strict
    evaluation's wall goes."""
    baseline_fault: BaselineFault | None = None
    """Set with stage "baseline_crash": where the baseline killed the child's CUDA context."""

    def scored(self) -> list[tuple[ShapeResult, float]]:
        """(row, speedup) of every row a winner is judged on: the timed rows it serves, at the speedup measured
        between its model neighbours where that was measured (the sandwich: as the server runs it), else
        isolated; and each row it declines at 1.0x (there the original op serves the call, at its speed)."""
        return [(s, (s.sandwich.speedup if s.sandwich and s.sandwich.speedup else s.speedup) if s.covered else 1.0)
                for s in self.shapes if (s.speedup or not s.covered)]

    @property
    def geomean_speedup(self) -> float | None:
        """Over the served, timed rows and the declined ones (at 1.0x): declining is never a gain."""
        values = [v for _, v in self.scored()]
        return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None

    def regressions(self, floor: float) -> list[ShapeResult]:
        """Served rows timed slower than `floor` x the original."""
        return [s for s, v in self.scored() if s.covered and v < floor]


EvalRequest.model_rebuild()
