"""The scored database of every candidate a run evaluated, and its diverse best set (the elites).

Not a single best: a kernel that is the fastest at some shape stays in the elites even when its geomean
is lower, because the next round may start from it and the final per-shape dispatch may use it there
(OpenEvolve / AlphaEvolve keep such a database; METR's best-of-k resamples from the best). Scores are the
harness's: `EvalResult.geomean_speedup` over the rows a kernel is judged on and `optimize.winner.passed`.
"""
from __future__ import annotations

import hashlib
import re
import threading

from pydantic import BaseModel, Field

from astra_sglang.harness.records import EvalResult, ShapeResult
from astra_sglang.optimize.agents.journal import candidate_id
from astra_sglang.optimize.records import CodeResult
from astra_sglang.optimize.winner import classify, passed

ORIGINAL = "r00"
"""The entry of the start kernel (the run's baseline unless --baseline says otherwise)."""


def shape_key(shape, dtype: str) -> str:
    return f"{'x'.join(map(str, shape))}/{dtype}"


def headroom(s: ShapeResult) -> float | None:
    """The row's kernel time over the floor (1.0: at the floor): over `floor_us` where the harness gave one, else
    from its share of the copy roofline; None where neither is known."""
    if s.floor_us and s.candidate:
        return s.candidate.median_us / s.floor_us
    return 100.0 / s.pct_roofline if s.pct_roofline else None


class Entry(BaseModel):
    """One evaluated candidate."""

    id: str
    round: int
    source: str
    """Path of its source file."""
    status: str
    detail: str = ""
    parent: str = ""
    plan: int | None = None
    """Index of the plan (in its round's PlanSet) it was written for."""
    island: int = 0
    attempts: int = 1
    speedup: float | None = None
    """The harness's geomean speedup, for an entry that passed."""
    shapes: dict[str, float] = Field(default_factory=dict)
    """shape/dtype -> speedup over the baseline (a declined shape: 1.0, the original serves it)."""
    headroom: dict[str, float] = Field(default_factory=dict)
    """shape/dtype -> kernel time over the floor (roofline or launch latency): 1.0 = at the floor."""
    fingerprint: str = ""
    """Hash of the source without whitespace: the same answer sampled twice is one elite."""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def fingerprint(text: str) -> str:
    return hashlib.sha256(re.sub(r"\s+", "", text).encode()).hexdigest()[:16]


def entry_from(id: str, round: int, source: str, text: str, result: EvalResult | None, error: str = "",
               parent: str = "", plan: int | None = None, attempts: int = 1, island: int = 0) -> Entry:
    row = classify(round, result, error)
    shapes, heads = {}, {}
    if result is not None and passed(result):
        for s in result.shapes:
            key = shape_key(s.shape, s.dtype)
            if not s.covered:
                shapes[key] = 1.0
            elif s.speedup:
                shapes[key] = s.speedup
                if (over := headroom(s)) is not None:
                    heads[key] = over
    return Entry(id=id, round=round, source=source, status=row.status, detail=row.detail, parent=parent, plan=plan,
                 island=island, attempts=attempts, speedup=row.speedup, shapes=shapes, headroom=heads,
                 fingerprint=fingerprint(text))


class Database:
    def __init__(self) -> None:
        self.entries: dict[str, Entry] = {}
        self._lock = threading.Lock()  # candidates enter from threads of their own

    def add(self, entry: Entry) -> Entry:
        with self._lock:
            self.entries = {**self.entries, entry.id: entry}  # readers iterate a snapshot, never a growing dict
        return entry

    def get(self, id: str) -> Entry | None:
        return self.entries.get(id)

    def correct(self) -> list[Entry]:
        """Entries that passed, best geomean first (the original counts, at its measured ~1.0x)."""
        # ties broken by id: the order candidates finished in (threads) must not change the result
        ok = (e for e in self.entries.values() if e.ok and e.speedup)
        return sorted(ok, key=lambda e: (-(e.speedup or 0), e.id))

    def best(self) -> Entry | None:
        ranked = self.correct()
        return ranked[0] if ranked else self.entries.get(ORIGINAL)

    def elites(self, k: int, include_original: bool = True, island: int | None = None,
               migrants: tuple[str, ...] = ()) -> list[Entry]:
        """Up to k diverse best entries: the best geomean, then each shape's fastest kernel (best geomean
        first), then the next best geomeans; one entry per distinct source. With `island`, only that island's
        entries, the original and the `migrants` (other islands' kernels offered to it)."""
        ranked = [e for e in self.correct() if (include_original or e.id != ORIGINAL) and
                  (island is None or e.island == island or e.id == ORIGINAL or e.id in migrants)]
        chosen: list[Entry] = []
        seen: set[str] = set()

        def take(entry: Entry) -> None:
            if len(chosen) < k and entry.fingerprint not in seen:
                chosen.append(entry)
                seen.add(entry.fingerprint)

        if ranked:
            take(ranked[0])
        keys = sorted({key for e in ranked for key in e.shapes})
        champions = {max(ranked, key=lambda e: e.shapes.get(key, 0.0)).id for key in keys}  # first of a tie
        for entry in ranked:
            if entry.id in champions:
                take(entry)
        for entry in ranked:
            take(entry)
        return chosen

    def at_floor(self, margin: float) -> Entry | None:
        """The best entry when it is within `margin` of the floor at every timed shape, else None."""
        best = self.best()
        if best is None or not best.ok or not best.headroom or len(best.headroom) < len(best.shapes):
            return None
        return best if all(h <= 1.0 + margin for h in best.headroom.values()) else None


def entry_of(round: int, slot: int, attempt: int, code: CodeResult, result: EvalResult | None) -> Entry:
    text = open(code.candidate).read() if code.candidate else ""
    return entry_from(candidate_id(round, slot, attempt), round, code.candidate or "", text, result,
                      error=code.error, parent=code.parent, plan=code.plan_index, attempts=attempt + 1,
                      island=code.island)
