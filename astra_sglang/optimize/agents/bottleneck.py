"""A structured bottleneck for the planner: what limits the best kernel, from Nsight Compute's sections and
stall reasons (harness/ncu.py) where ncu ran, else from the evaluation's own numbers (% of the copy
roofline, time against an empty kernel's).

The rules are the ones a CUDA engineer applies first (CudaForge gives its judge the same NCU facts):
DRAM throughput near peak means only moving fewer bytes helps; SM throughput near peak means compute;
low achieved occupancy, or warps stalled mostly on one reason, names the latency to hide.
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from astra_sglang.harness.ncu import ProfileFacts
from astra_sglang.harness.records import EvalResult

Kind = Literal["memory", "compute", "latency", "occupancy", "unknown"]
STALLS = {"long_scoreboard": "waiting on global-memory loads", "short_scoreboard": "waiting on shared memory / "
          "shuffles / special functions", "barrier": "waiting at __syncthreads", "wait": "fixed-latency dependencies"}


class Bottleneck(BaseModel):
    kind: Kind = "unknown"
    shape: str = ""
    """The shape the facts are about (ncu profiles one: the one furthest from the roofline)."""
    dram_pct: float | None = None
    """DRAM throughput, % of peak (ncu)."""
    sm_pct: float | None = None
    """Compute (SM) throughput, % of peak (ncu)."""
    occupancy_pct: float | None = None
    theoretical_occupancy_pct: float | None = None
    stalls: dict[str, float] = Field(default_factory=dict)
    """Stall reason -> warp cycles per issued instruction spent on it (ncu)."""
    evidence: list[str] = Field(default_factory=list)
    """The facts the kind was read from, one line each."""


def _metric(ncu: dict[str, float], *words: str) -> float | None:
    for name, value in ncu.items():
        if all(w in name for w in words):
            return value
    return None


def from_ncu(facts: ProfileFacts) -> Bottleneck:
    ncu = facts.ncu
    shape = next((k.removeprefix("profiled shape ") for k in ncu if k.startswith("profiled shape ")), "")
    b = Bottleneck(shape=shape, dram_pct=_metric(ncu, "DRAM Throughput"),
                   sm_pct=_metric(ncu, "Compute (SM) Throughput"),
                   occupancy_pct=_metric(ncu, "Achieved Occupancy"),
                   theoretical_occupancy_pct=_metric(ncu, "Theoretical Occupancy"),
                   stalls={r: v for r in STALLS if (v := _metric(ncu, f"stalled_{r}_")) is not None})
    if b.dram_pct is not None and b.dram_pct >= 70:
        b.kind = "memory"
        b.evidence.append(f"DRAM throughput {b.dram_pct:.0f}% of peak: only fewer bytes moved helps")
    elif b.sm_pct is not None and b.sm_pct >= 70:
        b.kind = "compute"
        b.evidence.append(f"SM throughput {b.sm_pct:.0f}% of peak: fewer or cheaper instructions")
    elif b.occupancy_pct is not None and b.occupancy_pct < 30:
        b.kind = "occupancy"
        b.evidence.append(f"achieved occupancy {b.occupancy_pct:.0f}% (theoretical "
                          f"{b.theoretical_occupancy_pct or 0:.0f}%): too few warps to hide latency")
    elif b.stalls:
        b.kind = "latency"
    if b.stalls:
        total = sum(b.stalls.values()) or 1.0
        top = max(b.stalls, key=b.stalls.get)
        b.evidence.append(f"warps stall mostly {STALLS[top]} ({top}: {100 * b.stalls[top] / total:.0f}% of the "
                          "stall cycles ncu attributes to the four main reasons)")
    return b


def from_result(result: EvalResult) -> Bottleneck:
    """Without ncu: the roofline share and the launch floor the harness measured."""
    timed = [s for s in result.shapes if s.candidate is not None and s.pct_roofline is not None]
    if not timed:
        return Bottleneck(evidence=["no timed shapes"])
    worst = min(timed, key=lambda s: s.pct_roofline)
    b = Bottleneck(shape=f"{'x'.join(map(str, worst.shape))} {worst.dtype}")
    floor = result.empty_kernel_us
    short = [s for s in timed if floor and s.candidate.median_us < 3 * floor]
    if all(s.pct_roofline >= 80 for s in timed):
        b.kind = "memory"
        b.evidence.append(f"every timed shape is at >= 80% of the copy roofline (lowest {worst.pct_roofline:.0f}%)")
    elif len(short) * 2 >= len(timed):
        b.kind = "latency"
        b.evidence.append(f"{len(short)} of {len(timed)} shapes take under 3x an empty kernel ({floor:.2f} us): "
                          "launch and dependency latency, not bandwidth")
    else:
        b.evidence.append(f"furthest from the roofline: {b.shape} at {worst.pct_roofline:.0f}%")
    return b


def bottleneck(result: EvalResult, facts: ProfileFacts | None) -> Bottleneck:
    """ncu's reading where it has one, completed by the evaluation's."""
    own = from_result(result)
    if facts is None or not facts.ncu:
        return own
    found = from_ncu(facts)
    if found.kind == "unknown":
        found.kind = own.kind
    found.evidence += own.evidence
    return found
