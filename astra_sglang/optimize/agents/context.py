"""What the agents read at the start of a round: the scored database's diverse best kernels, every past
plan with the per-shape results of the candidates written for it, the GPU's facts, the structured
bottleneck of the best kernel and its profile, and the build's C++ standard (read from the harness's
flags, so the prompt cannot drift from the build)."""
from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

from astra_sglang.optimize.agents.bottleneck import Bottleneck
from astra_sglang.optimize.agents.database import ORIGINAL, Database, Entry
from astra_sglang.optimize.agents.journal import RunLog
from astra_sglang.optimize.pool.devices import GpuFacts
from astra_sglang.optimize.records import HistoryRow, PlanSet, Shape

MAX_PAST_PLANS = 12
"""The most recent plans the planner sees (older ones rarely change the next choice, and cost tokens)."""


def cxx_standard() -> str:
    """The build's -std flag (harness.build.BASE_FLAGS), e.g. -std=c++20."""
    from astra_sglang.harness.build import BASE_FLAGS

    return next((f for f in BASE_FLAGS if f.startswith("-std=")), "-std=c++17")


class PastPlan(BaseModel):
    round: int
    index: int
    parent: str
    text: str
    outcomes: list[Entry] = Field(default_factory=list)
    """The candidates written for it (their last attempt each)."""


class RoundContext(BaseModel):
    round: int
    rounds: int
    best: Entry
    """The best kernel so far (the start kernel until a candidate beats it)."""
    source: str
    """The best kernel's source."""
    elites: list[Entry] = Field(default_factory=list)
    plans: list[PastPlan] = Field(default_factory=list)
    history: list[HistoryRow] = Field(default_factory=list)
    """Every finished candidate, in order (single-agent mode's view)."""
    keys: list[str] = Field(default_factory=list)
    """shape/dtype columns of the per-shape tables, in suite order."""
    gpu: GpuFacts = Field(default_factory=GpuFacts)
    bottleneck: Bottleneck | None = None
    profile: str = ""
    """The ProfilingAgent's summary of the best kernel."""
    shapes: list[Shape] = Field(default_factory=list)
    dtypes: list[str] = Field(default_factory=list)
    std: str = Field(default_factory=cxx_standard)
    population: int = 1
    plans_wanted: int = 1

    @property
    def parents(self) -> list[str]:
        return [e.id for e in self.elites]


def last_attempts(db: Database) -> list[Entry]:
    """Each candidate slot's latest attempt (a repaired candidate is one candidate)."""
    latest: dict[str, Entry] = {}
    for entry in db.entries.values():
        slot = entry.id.rsplit("-a", 1)[0]
        if entry.id != ORIGINAL and (slot not in latest or entry.attempts > latest[slot].attempts):
            latest[slot] = entry
    return sorted(latest.values(), key=lambda e: e.id)  # in id order, not in the order threads finished


def past_plans(log: RunLog, db: Database, before: int) -> list[PastPlan]:
    out = []
    finished = last_attempts(db)
    for rec in log.of_role("plan"):
        if not 0 < rec.round < before:
            continue
        for i, item in enumerate(PlanSet.model_validate(rec.payload).plans):
            outcomes = [e for e in finished if e.round == rec.round and e.plan == i]
            out.append(PastPlan(round=rec.round, index=i, parent=item.parent, text=item.text[:600], outcomes=outcomes))
    return out[-MAX_PAST_PLANS:]


def history(log: RunLog) -> list[HistoryRow]:
    return sorted((HistoryRow.model_validate(r.payload) for r in log.of_role("cand")), key=lambda h: h.id)


def source_of(entry: Entry) -> str:
    path = Path(entry.source)
    return path.read_text() if path.is_file() else ""
