"""Profiling in the loop: which candidates Nsight Compute looks at, at which shapes, and what of it each prompt
reads.

The policy: the start kernel and every new best are always profiled; any other correct candidate is profiled
(with its parent at the same shapes: before/after) while profiling has taken less than `ncu_share` of the
evaluations' GPU time. Profiles run alone on a GPU worker (pool.exclusive), in the candidate's own thread, so
they overlap the model's work and other candidates' evaluations. Each is a memoized step of the run log
(role "profile", keyed by the candidate), with the rule-based facts, the bottleneck and ncu's metrics per
shape; only a new best gets the ProfilingAgent's written reading (the planner reads it).
"""
from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from astra_sglang.harness.records import EvalResult
from astra_sglang.optimize.agents.bottleneck import Bottleneck, bottleneck
from astra_sglang.optimize.agents.database import ORIGINAL, Entry, shape_key
from astra_sglang.optimize.agents.journal import step_key
from astra_sglang.optimize.agents.ncu_deep import CandidateProfile
from astra_sglang.optimize.agents.profiling import metric_changes, pick_shapes
from astra_sglang.optimize.agents.prompts import StepFailed
from astra_sglang.optimize.records import LogRecord, ProfileSummary, Transcript

if TYPE_CHECKING:
    from astra_sglang.optimize.agents.steps import Steps as Optimizer


class Profile(BaseModel):
    """A profile step's record: what the prompts read of one candidate."""

    entry: str
    summary: ProfileSummary = Field(default_factory=ProfileSummary)
    bottleneck: Bottleneck = Field(default_factory=Bottleneck)
    ncu: CandidateProfile = Field(default_factory=CandidateProfile)


def _measure(profiler, library: str, shapes, keep: str, source: str, result: EvalResult) -> CandidateProfile:
    """On the GPU worker: the deep profiler where given, else any Profiler's facts at its own shape."""
    if hasattr(profiler, "profile_entry"):
        return profiler.profile_entry(library, shapes, keep)
    facts = profiler(source, result)
    shape = next((k.removeprefix("profiled shape ") for k in facts.ncu if k.startswith("profiled shape ")), "")
    ncu = {k: v for k, v in facts.ncu.items() if not k.startswith("profiled shape ")}
    key = shape.replace(" ", "/") if shape else (shape_key(*shapes[0]) if shapes else "")
    return CandidateProfile(shapes={key: ncu} if ncu else {}, registers=facts.registers, spill_bytes=facts.spill_bytes)


class Profiles:
    def __init__(self, opt: "Optimizer"):
        self.opt = opt
        self.spent_s = 0.0
        self._lock = threading.Lock()

    def get(self, entry: Entry | None) -> Profile | None:
        if entry is None:
            return None
        rec = self.opt.log.find(entry.round, "profile", entry.id)
        return Profile.model_validate(rec.payload) if rec is not None and "entry" in rec.payload else None

    def affordable(self) -> bool:
        gpu_s = sum(s.seconds for s in self.opt.pool.stats().evaluations)
        gpu_s = gpu_s or sum(EvalResult.model_validate(r.payload).wall_s for r in self.opt.log.of_role("eval"))
        with self._lock:
            return self.spent_s < self.opt.config.ncu_share * gpu_s

    def profile(self, entry: Entry, result: EvalResult, new_best: bool, summarize: bool = False) -> Profile | None:
        """The candidate's profile (memoized); its parent is profiled first at the same shapes (before/after)
        where it has no profile yet and that is affordable too."""
        opt = self.opt
        if (done := self.get(entry)) is not None:
            return done
        if not (new_best or (self.measurable(result) and self.affordable())):
            return None
        if not self.measurable(result):  # the rule-based reading only (no ncu here, or nothing built to profile)
            return self._run(entry, result, [], summarize)
        parent = opt.db.get(entry.parent)
        before = self.get(parent)
        shapes = pick_shapes(result, parent, opt.config.ncu_shapes, list(before.ncu.shapes) if before else [])
        if parent is not None and before is None and self.affordable():
            rec = opt.log.find(parent.round, "eval", "" if parent.id == ORIGINAL else step_key(parent.id))
            if rec is not None:
                self._run(parent, EvalResult.model_validate(rec.payload), shapes, False)
        return self._run(entry, result, shapes, summarize)

    def measurable(self, result: EvalResult) -> bool:
        return (self.opt.profiler is not None and result.ok and result.build is not None
                and bool(result.build.library) and Path(result.build.library).is_file())

    def _run(self, entry: Entry, result: EvalResult, shapes, summarize: bool) -> Profile | None:
        opt = self.opt

        def run(t: Transcript) -> LogRecord:
            keep = str(opt.log.dir / "profiles" / entry.id)
            # on a GPU worker, alone on its GPU: ncu's replays must not overlap another candidate's timing
            measured = opt.pool.exclusive(_measure, opt.profiler, result.build.library, shapes, keep, entry.source,
                                          result).result() if shapes and self.measurable(result) else \
                CandidateProfile(registers=result.build.registers if result.build else None,
                                 spill_bytes=result.build.spill_bytes if result.build else None)
            with self._lock:
                self.spent_s += measured.seconds
            found = bottleneck(result, measured.facts() if measured.shapes else None)
            summary = opt.profiling.summarize(entry.round, result, measured.facts(), opt.dtypes, t, found.kind,
                                              summarize)
            return LogRecord(round=entry.round, role="profile", candidate=entry.source,
                             summary=f"{entry.id}: {found.kind}; {len(measured.shapes)} shape(s), "
                                     f"{len(measured.hotspots)} hotspot(s)",
                             payload=Profile(entry=entry.id, summary=summary, bottleneck=found,
                                             ncu=measured).model_dump(mode="json"))

        try:
            return Profile.model_validate(opt.step(entry.round, "profile", run, entry.id).payload)
        except StepFailed:
            return None

    def changes(self, parent: Entry) -> tuple[str, list[str]]:
        """(the parent's best profiled child, the metrics that moved from the parent to it): what the last change
        did to the hardware, for the coder who starts from the parent again."""
        before = self.get(parent)
        if before is None:
            return "", []
        children = sorted((e for e in self.opt.db.entries.values() if e.parent == parent.id and e.ok),
                          key=lambda e: (-(e.speedup or 0), e.id))
        for child in children:
            after = self.get(child)
            if after is None:
                continue
            common = [k for k in before.ncu.shapes if k in after.ncu.shapes]
            if common:
                moved = metric_changes(before.ncu.shapes[common[0]], after.ncu.shapes[common[0]],
                                       before.bottleneck.kind, self.opt.config.ncu_metrics // 2)
                return f"{child.id} at {common[0]}", moved
        return "", []
