"""What the profiler tells the agents: rule-based facts from an evaluation, the Nsight Compute metrics that
matter for the bottleneck (more than a fixed handful: ranked by relevance to what limits the kernel), the
shapes worth profiling, and how the metrics moved between a parent and a child (before/after).
"""
from __future__ import annotations

from astra_sglang.harness.ncu import ProfileFacts
from astra_sglang.harness.records import EvalResult, ShapeResult
from astra_sglang.optimize.agents.database import Entry, headroom, shape_key

ALWAYS = ("Duration", "DRAM Throughput", "Compute (SM) Throughput", "Achieved Occupancy", "Registers Per Thread",
          "Warp Cycles Per Issued Instruction")
RELEVANT = {
    "memory": ("DRAM", "Memory Throughput", "L2", "L1/TEX", "Hit Rate", "Sector", "Bytes", "Mem Busy", "Bandwidth",
               "Uncoalesced", "Excessive", "Mem Pipes"),
    "compute": ("Compute (SM) Throughput", "SM Busy", "Issue Slots", "Ipc", "Pipe", "FMA", "ALU", "Executed Instr",
                "Issued", "Branch"),
    "latency": ("stalled", "Warp Cycles", "Eligible", "Issued Warp", "No Eligible", "Active Warps", "Scoreboard",
                "Branch", "Divergent"),
    "occupancy": ("Occupancy", "Registers", "Block Limit", "Waves Per SM", "Shared Memory", "Block Size", "Grid Size",
                  "Threads"),
}


def choose_metrics(ncu: dict[str, float], kind: str = "unknown", limit: int = 32) -> list[tuple[str, float]]:
    """Up to `limit` metrics: the few every reading needs, then those of the bottleneck's kind (in the order of its
    words: what says most about that kind first), then those of the other kinds, then the rest."""
    words = RELEVANT.get(kind, ())
    others = tuple(w for k, ws in RELEVANT.items() if k != kind for w in ws)

    def rank(name: str) -> tuple[int, int]:
        """(tier, the first matching word's place in its list): the kind's own words in their order."""
        if name.startswith("profiled shape"):
            return 0, 0
        if any(w in name for w in ALWAYS):
            return 1, 0
        for tier, group in ((2, words), (3, others)):
            found = next((i for i, w in enumerate(group) if w in name), None)
            if found is not None:
                return tier, found
        return 4, 0

    names = list(ncu)
    order = sorted(range(len(names)), key=lambda i: (*rank(names[i]), i))
    return [(names[i], ncu[names[i]]) for i in order[:limit]]


def profile_facts(result: EvalResult, facts: ProfileFacts | None = None, kind: str = "unknown",
                  limit: int = 32) -> list[str]:
    """Rule-based findings from one evaluation (no LLM): failures, roofline, latency, registers, ncu metrics."""
    out: list[str] = []
    if result.stage != "done" or not result.ok:
        out.append(f"evaluation stopped at {result.stage}: {result.reason or 'failed'}")
    wrong = [s for s in result.shapes if s.correct is False]
    if wrong:
        out.append("incorrect on " + ", ".join(f"{'x'.join(map(str, s.shape))}/{s.dtype}"
                                               f"{f' ({s.reason})' if s.reason else ''}" for s in wrong[:6]))
    timed = [s for s in result.shapes if s.candidate is not None]
    if result.geomean_speedup:
        out.append(f"geomean speedup vs baseline {result.geomean_speedup:.3f}x over {len(timed)} timed cases")
    slower = [s for s in timed if s.speedup and s.speedup < 0.98]
    if slower:
        out.append("slower than the baseline on " + ", ".join(
            f"{'x'.join(map(str, s.shape))}/{s.dtype} ({s.speedup:.2f}x)" for s in slower[:6]))
    roof = [s for s in timed if s.pct_roofline is not None]
    if roof:
        low = sorted(roof, key=lambda s: s.pct_roofline)[:3]
        out.append("furthest from the memory roofline: " + ", ".join(
            f"{'x'.join(map(str, s.shape))}/{s.dtype} at {s.pct_roofline:.0f}%" for s in low))
        if all(s.pct_roofline >= 85 for s in roof):
            out.append("every timed shape is within 15% of the memory roofline: little headroom left")
    floor = result.empty_kernel_us
    latency = [s for s in timed if floor and s.candidate.median_us < 3 * floor]
    if latency:
        out.append(f"{len(latency)} case(s) take under 3x an empty kernel ({floor:.2f} us): launch/latency bound, "
                   "so fewer blocks, less setup and fewer dependent steps matter more than bandwidth")
    regs = (facts.registers if facts and facts.registers is not None else None) or (
        result.build.registers if result.build else None)
    spills = (facts.spill_bytes if facts and facts.spill_bytes is not None else None) or (
        result.build.spill_bytes if result.build else None)
    if regs is not None:
        out.append(f"{regs} registers per thread" + (" (high: limits occupancy)" if regs > 128 else ""))
    if spills:
        out.append(f"spills {spills} bytes to local memory")
    for name, value in choose_metrics(facts.ncu if facts else {}, kind, limit):
        out.append(f"ncu {name} = {value:g}")
    return out or ["no measurements (compile-only run)"]


def _relative(row: ShapeResult, parent: Entry | None) -> float:
    """The candidate's speedup at this row over its parent's (< 1: slower there than its parent)."""
    mine = row.speedup or 0.0
    theirs = parent.shapes.get(shape_key(row.shape, row.dtype)) if parent else None
    return mine / theirs if theirs else mine


def pick_shapes(result: EvalResult, parent: Entry | None, count: int,
                also: list[str] = ()) -> list[tuple[tuple[int, ...], str]]:
    """The shapes a profile should cover, one dtype (bfloat16 where timed): `also` first (the parent's profiled
    shapes, so before/after compare like with like), then the one furthest from the floor, the one that lost
    most against the parent, and the largest; `count` of them, and at least one beyond `also`."""
    timed = [s for s in result.shapes if s.candidate is not None and s.speedup]
    dtype = "bfloat16" if any(s.dtype == "bfloat16" for s in timed) else (timed[0].dtype if timed else "")
    rows = [s for s in timed if s.dtype == dtype]
    if not rows:
        return []

    def furthest(s: ShapeResult) -> float:
        over = headroom(s)
        return 1.0 if over is None else over  # nothing known: counted as at the floor

    shared = [s for key in also for s in rows if shape_key(s.shape, s.dtype) == key]
    order = [*shared, max(rows, key=furthest), min(rows, key=lambda s: _relative(s, parent)),
             max(rows, key=lambda s: s.min_bytes or s.candidate.median_us)]
    chosen: list[tuple[tuple[int, ...], str]] = []
    for s in order:
        pair = (tuple(s.shape), s.dtype)
        if pair not in chosen:
            chosen.append(pair)
    return chosen[:max(count, len(shared) + 1)]


def metric_changes(before: dict[str, float], after: dict[str, float], kind: str = "unknown",
                   limit: int = 12, min_change: float = 0.1) -> list[str]:
    """'name: before -> after' for the relevant metrics that moved by at least `min_change` (relative)."""
    moved = {k: after[k] for k in before.keys() & after.keys()
             if abs(after[k] - before[k]) > min_change * max(abs(before[k]), 1e-9) and not k.startswith("profiled")}
    ranked = [name for name, _ in choose_metrics(moved, kind, len(moved))]
    return [f"{name}: {before[name]:g} -> {after[name]:g}" for name in ranked[:limit]]
