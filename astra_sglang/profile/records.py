"""Typed records of a profile: the kernels of each phase, the ops behind them, their shapes and headroom.

The JSON of a `Profile` is also a shape source: `bench OP --shapes profile.json` and `optimize` take the
shapes the server really ran from it (`ops[op].shapes`), as specs/profiled.py reads them.
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from astra_sglang.specs.profiled import OpShapes

Kind = Literal["spec", "sglang", "library", "other"]
"""spec: an op with a spec in extract/ (the tool can optimize it now); sglang: an op SGLang exposes that has no
spec yet (`astra-sglang onboard` can make one); library: a kernel of a library the tool does not touch
(cuBLAS GEMMs, attention); other: unknown or framework glue (PyTorch elementwise, copies)."""


class KernelRow(BaseModel):
    name: str
    """The kernel's name as the trace gives it (demangled), shortened to its function name."""
    kind: Kind
    op: str = ""
    """The op it belongs to (a spec name for kind spec), or a library family (GEMM, attention)."""
    action: str = ""
    """What the tool can do with it, said plainly."""
    calls: int
    total_us: float
    per_step_us: float
    share: float
    """Of the phase's GPU kernel time."""
    bytes_per_step: int | None = None
    """Fewest bytes its calls move in a step (the op's spec over the shapes each step ran); None: unknown."""
    gbps: float | None = None
    pct_roofline: float | None = None
    gain_pct: float | None = None
    """What the phase's GPU time would lose if this kernel ran at the copy roofline (or the empty-kernel floor):
    share x headroom, Amdahl's gain, in % of the phase's kernel time; None where bytes are unknown."""


class Phase(BaseModel):
    name: Literal["prefill", "decode", "mixed"]
    steps: int
    step_wall_us: float
    """Mean wall time of a scheduler step (its span on the host), GPU and host work together."""
    step_wall_median_us: float = 0.0
    step_wall_max_us: float = 0.0
    """The median and the longest step: one step that waits (a Triton JIT compile, a full launch queue) moves
    the mean by its excess over the steps recorded; the median does not. 0.0: a profile written before them."""
    gpu_us_per_step: float
    """Kernel time per step (sum of kernel durations)."""
    tokens_per_step: float
    rows: list[KernelRow]
    ops: list[OpShapes] = Field(default_factory=list)


class Workload(BaseModel):
    name: str
    concurrency: int
    input_len: int
    output_len: int
    num_prompts: int
    settle_s: float = 5.0
    """Seconds between the benchmark's main run starting and the first recorded step: the batch fills up."""


class Profile(BaseModel):
    date: str
    gpu: str = ""
    model: str = ""
    server: list[str] = Field(default_factory=list)
    """The server's arguments (attention backend, TP...)."""
    patched: bool = False
    workload: Workload | None = None
    roofline_gbps: float | None = None
    empty_us: float | None = None
    phases: list[Phase]
    engagement: dict[str, dict[str, int]] = Field(default_factory=dict)
    """Patched runs: per op, the patch layer's counts (calls, kernel_calls, fallbacks, deferred)."""
    traces: list[str] = Field(default_factory=list)

    def phase(self, name: str) -> Phase | None:
        return next((p for p in self.phases if p.name == name), None)
