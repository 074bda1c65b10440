"""What a pool did, as spans of time: every build and every GPU evaluation, and the throughput figures
the search benchmark reports (evaluations per GPU-hour, median seconds per evaluation, each GPU's share)."""
from __future__ import annotations

import statistics
import time

from pydantic import BaseModel, Field


class Span(BaseModel):
    lane: str
    """The GPU an evaluation ran on ("-" without a GPU), or "cpu" for a build."""
    start: float
    end: float
    cached: bool = False
    """A build the cache already had."""

    @property
    def seconds(self) -> float:
        return self.end - self.start


class Throughput(BaseModel):
    gpus: int
    evaluations: int
    wall_s: float
    per_gpu_hour: float
    """Evaluations per hour of one GPU: evaluations / (wall hours x GPUs)."""
    median_eval_s: float | None
    busy_share: dict[str, float]
    """Per GPU: the share of the wall time it spent in evaluations."""
    eval_share: dict[str, float]
    """Per GPU: its share of all evaluations."""
    builds: int
    median_build_s: float | None


class PoolStats(BaseModel):
    lanes: list[str]
    """One per evaluation worker (a GPU); a Ray pool adds each GPU as it first reports."""
    gpus: int | None = None
    """How many GPUs the pool had (default: its GPU lanes)."""
    started: float = Field(default_factory=time.time)
    evaluations: list[Span] = Field(default_factory=list)
    builds: list[Span] = Field(default_factory=list)

    def throughput(self, since: float | None = None, until: float | None = None) -> Throughput:
        since = self.started if since is None else since
        until = until or max([s.end for s in self.evaluations + self.builds], default=since)
        spans = [s for s in self.evaluations if s.start >= since and s.end <= until]
        builds = [s for s in self.builds if s.start >= since and s.end <= until and not s.cached]
        wall = max(until - since, 1e-9)
        gpus = self.gpus or len([lane for lane in self.lanes if lane != "-"]) or 1
        busy = {lane: sum(s.seconds for s in spans if s.lane == lane) / wall for lane in self.lanes}
        count = {lane: sum(1 for s in spans if s.lane == lane) for lane in self.lanes}
        return Throughput(gpus=gpus, evaluations=len(spans), wall_s=wall, per_gpu_hour=len(spans) * 3600 / wall / gpus,
                          median_eval_s=statistics.median(s.seconds for s in spans) if spans else None,
                          busy_share=busy, eval_share={k: v / max(len(spans), 1) for k, v in count.items()},
                          builds=len(builds),
                          median_build_s=statistics.median(s.seconds for s in builds) if builds else None)

    def overlaps(self) -> list[tuple[Span, Span]]:
        """Pairs of evaluations that ran on the same GPU at the same time (there must be none)."""
        out = []
        for lane in self.lanes:
            spans = sorted((s for s in self.evaluations if s.lane == lane), key=lambda s: s.start)
            out += [(a, b) for a, b in zip(spans, spans[1:]) if b.start < a.end]
        return out
