"""What the agents read: the planner's view at the start of a round (its island's diverse best kernels, the
run's memory of plans and what their candidates measured, lessons from earlier runs, the GPU's facts, the best
kernel's bottleneck and profile), and the coder's view of the parent it starts from (the parent's profile and
bottleneck, how the metrics moved from it to its best child, the failures already seen on it). The build's
C++ standard is read from the harness's flags, so no prompt can drift from the build."""
from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

from astra_sglang.optimize.agents.bottleneck import Bottleneck
from astra_sglang.optimize.agents.database import Database, Entry
from astra_sglang.optimize.agents.journal import RunLog
from astra_sglang.optimize.agents.memory import PastPlan
from astra_sglang.optimize.agents.ncu_deep import Hotspot
from astra_sglang.optimize.agents.store import Lesson
from astra_sglang.optimize.pool.devices import GpuFacts
from astra_sglang.optimize.records import HistoryRow, Shape

MAX_FAILURES = 8
"""The most recent failures on a parent the coder is shown (older ones are rarely new information)."""


def cxx_standard() -> str:
    """The build's -std flag (harness.build.BASE_FLAGS), e.g. -std=c++20."""
    from astra_sglang.harness.build import BASE_FLAGS

    return next((f for f in BASE_FLAGS if f.startswith("-std=")), "-std=c++17")


class RoundContext(BaseModel):
    round: int
    rounds: int
    best: Entry
    """The best kernel so far (the start kernel until a candidate beats it)."""
    source: str
    """The best kernel's source."""
    island: int = 0
    islands: int = 1
    elites: list[Entry] = Field(default_factory=list)
    """The island's diverse best kernels (and migrants from the others), the parents to choose from."""
    migrants: list[str] = Field(default_factory=list)
    """Other islands' best kernels offered this round (every `migrate_every` rounds)."""
    digest: str = ""
    """The summarizer's digest of the oldest plans (when the whole story is too long)."""
    plans: list[PastPlan] = Field(default_factory=list)
    lessons: list[Lesson] = Field(default_factory=list)
    """What earlier runs learned on this op or this kind of op, on this GPU first."""
    history: list[HistoryRow] = Field(default_factory=list)
    """Every finished candidate, in order (single-agent mode's view)."""
    keys: list[str] = Field(default_factory=list)
    """shape/dtype columns of the per-shape tables, in suite order."""
    gpu: GpuFacts = Field(default_factory=GpuFacts)
    bottleneck: Bottleneck | None = None
    profile: str = ""
    """The ProfilingAgent's summary of the best kernel."""
    hotspots: list[Hotspot] = Field(default_factory=list)
    shapes: list[Shape] = Field(default_factory=list)
    dtypes: list[str] = Field(default_factory=list)
    std: str = Field(default_factory=cxx_standard)
    population: int = 1
    plans_wanted: int = 1

    @property
    def parents(self) -> list[str]:
        return [e.id for e in self.elites]


class CoderContext(BaseModel):
    """The parent a plan starts from, as the coder sees it."""

    parent: Entry
    source: str
    profile: str = ""
    """The parent's profile: rule-based facts and the metrics that matter for its bottleneck."""
    bottleneck: Bottleneck | None = None
    hotspots: list[Hotspot] = Field(default_factory=list)
    child: str = ""
    """The parent's best profiled child, whose metrics `changes` compares with the parent's."""
    changes: list[str] = Field(default_factory=list)
    failures: list[str] = Field(default_factory=list)
    """Attempts already written on this parent that failed, with why."""


def failures_on(db: Database, parent: str) -> list[str]:
    """Every failed attempt that started from `parent`, newest last, at most MAX_FAILURES."""
    failed = sorted((e for e in db.entries.values() if e.parent == parent and not e.ok and e.status != "compiled"),
                    key=lambda e: (e.round, e.id))
    return [f"{e.id}: {e.status}" + (f" ({' '.join(e.detail.split())[:240]})" if e.detail else "")
            for e in failed[-MAX_FAILURES:]]


def history(log: RunLog) -> list[HistoryRow]:
    return sorted((HistoryRow.model_validate(r.payload) for r in log.of_role("cand")), key=lambda h: h.id)


def source_of(entry: Entry) -> str:
    path = Path(entry.source)
    return path.read_text() if path.is_file() else ""
