"""What a candidate's conversation is told after an attempt: a failure goes back as a repair (the parse or
safety error, the build log, the mismatching shapes, the crash); a correct kernel that is slower than its
parent, or far from the floor, goes back as a speed turn with its per-shape timings against the parent's and
the floor, and, where it was profiled, the metrics that moved from the parent to it and its stall hotspots.
"""
from __future__ import annotations

from pydantic import BaseModel

from astra_sglang.harness.records import EvalResult
from astra_sglang.optimize.agents.database import Entry, headroom, shape_key
from astra_sglang.optimize.agents.prompts import render
from astra_sglang.optimize.records import Message, RunConfig

SLOWER = 0.98
"""A candidate below this fraction of its parent's geomean speedup is slower than its parent."""


class ShapeRow(BaseModel):
    shape: str
    dtype: str
    us: float
    parent_us: float | None = None
    vs_parent: float | None = None
    """Parent's time over this candidate's (> 1: faster than the parent)."""
    floor_us: float | None = None
    headroom: float | None = None


def repair_message(candidate: str, result: EvalResult | None, error: str) -> list[Message]:
    """What a failed attempt is told, as one user message that continues the candidate's conversation."""
    return render("repair.j2", candidate=candidate, result=result, error=error,
                  log=(result.build.log[-3000:] if result is not None and result.build is not None else ""),
                  wrong=[s for s in result.shapes if s.correct is False][:12] if result is not None else [])


def why_slow(entry: Entry, parent: Entry | None, config: RunConfig) -> str:
    """Why a correct candidate should go on (empty: it is good enough to stop)."""
    if parent is not None and parent.speedup and entry.speedup and entry.speedup < SLOWER * parent.speedup:
        return f"it is slower than its parent {parent.id} ({entry.speedup:.3f}x against {parent.speedup:.3f}x)"
    far = {k: h for k, h in entry.headroom.items() if h > config.far_from_floor}
    if far:
        worst = max(far, key=far.get)
        return (f"it is far from the floor at {len(far)} shape(s) (worst {worst}: {far[worst]:.2f}x the floor, "
                f"more than {config.far_from_floor:.2f}x)")
    return ""


def shape_rows(result: EvalResult, parent: Entry | None, parent_result: EvalResult | None) -> list[ShapeRow]:
    theirs = {shape_key(s.shape, s.dtype): s for s in (parent_result.shapes if parent_result else [])}
    rows = []
    for s in result.shapes:
        if s.candidate is None:
            continue
        key = shape_key(s.shape, s.dtype)
        other = theirs.get(key)
        parent_us = other.candidate.median_us if other is not None and other.candidate else None
        rows.append(ShapeRow(shape="x".join(map(str, s.shape)), dtype=s.dtype, us=s.candidate.median_us,
                             parent_us=parent_us, vs_parent=parent_us / s.candidate.median_us if parent_us else None,
                             floor_us=s.floor_us, headroom=headroom(s)))
    return rows


def speed_message(entry: Entry, parent: Entry, why: str, rows: list[ShapeRow], left: int, at: str = "",
                  changes: list[str] = (), metrics: list[tuple[str, float]] = (), hotspots=()) -> list[Message]:
    """A speed turn: what a correct but slow candidate is told, continuing its conversation."""
    return render("speed.j2", entry=entry, parent=parent, why=why, rows=rows, left=left, at=at, changes=list(changes),
                  metrics=list(metrics), hotspots=list(hotspots))
