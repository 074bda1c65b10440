"""What SGLang's fused MoE tuner runs record (sglang_tuner_run, sglang_tuner_exhaustive): per batch size and per
run, and the wall time its users would wait for it."""
from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from astra_sglang.errors import AstraError
from astra_sglang.stats import t_quantile

Mode = Literal["full", "bounded", "exhaustive", "cold"]
"""cold: only a cold sample of its space, for its users' wall (no best; earlier_runs joins it to a run that has one)."""


class TunerBatch(BaseModel):
    """SGLang's tuner at one batch size."""

    tokens: int
    mode: Mode
    gpu: str = ""
    space: int = 0
    """Configs in SGLang's space (get_configs_compute_bound, filtered as its main filters it)."""
    given: int = 0
    """Configs its loop was given (the whole space, or the subset)."""
    ranked: int = 0
    """Of the subset, how many came first as ranked by us (the rest: a random sample)."""
    costs: list[float] = Field(default_factory=list)
    """Seconds its loop spent on each config it started, in order (compile or cache load, run, graph capture,
    timing); how many it started is len(costs): fewer than `given` where the deadline cut its loop."""
    seconds: float = 0.0
    """Wall time of its loop at this batch size."""
    best: dict | None = None
    """The config it picked (SGLang's dict)."""
    reason: str = ""
    timed: dict[str, float] = Field(default_factory=dict)
    """Label ("pick", "tuner", "ours") -> microseconds by the script's benchmark_config (median of the rounds)."""
    timed_reason: str = ""
    skipped: int = 0
    """bounded, exhaustive: configs its loop started and skipped (its benchmark_config raised: compile or resource
    errors)."""
    skip_reasons: dict[str, int] = Field(default_factory=dict)
    """bounded, exhaustive: the skips' distinct first lines (120 characters) -> how many."""
    landscape: dict[str, float] = Field(default_factory=dict)
    """bounded, exhaustive: config code (MoeConfig.code) -> microseconds its loop's `benchmark_config` call returned
    (num_iters=10, the figure its pick is the fastest of), for every config its loop timed."""
    failed: dict[str, str] = Field(default_factory=dict)
    """bounded, exhaustive: config code -> the first line of what its `benchmark_config` raised ("OutOfResources:
    out of resource: shared memory, Required: ..."), for every config its loop skipped."""
    warmed: int = 0
    """exhaustive: configs of the space the warm phase started at this batch size (all shards together)."""
    warm_s: float = 0.0
    """exhaustive: seconds from the first warm shard's start to the last one's end at this batch size."""
    cold_costs: list[float] = Field(default_factory=list)
    """exhaustive, cold: seconds per config of a cold-cache sample of its space drawn at random (a bounded run in the
    same call, before the warm phase; or the whole of a cold run): what its users' full sweep is estimated from."""

    @property
    def covered(self) -> int:
        """Configs its loop started (the whole space only where this equals `space`)."""
        return len(self.costs)

    def estimate(self) -> tuple[float, float] | None:
        """(seconds, 95% half-width) of a full sweep of the space at this batch size as its users run it (a cold
        Triton cache), from the randomly sampled configs' costs (the ranked ones left out: not drawn at random).

        A process's first config also pays its one-time costs (Triton's and CUDA's first loads; 5-15 s against
        ~1 s a config in the 2026-11-27 H200 bar's cold samples), which its users pay once, not once a config: it
        is counted once, and the others' mean times the rest of the space; the interval is Student's t over
        those others (at least 2)."""
        if self.mode == "full":
            return self.seconds, 0.0
        if self.mode in ("exhaustive", "cold"):
            first, rest = (self.cold_costs[0], self.cold_costs[1:]) if self.cold_costs else (0.0, [])
        elif self.ranked:  # the process's first config is a ranked one: the drawn ones are all alike
            first, rest = 0.0, self.costs[self.ranked:]
        else:
            first, rest = (self.costs[0], self.costs[1:]) if self.costs else (0.0, [])
        if len(rest) < 2:
            return None
        mean, sd, n = statistics.fmean(rest), statistics.stdev(rest), len(rest)
        left = self.space - (1 if first else 0)
        return first + mean * left, t_quantile(0.975, n - 1) * sd / math.sqrt(n) * left


class TunerRun(BaseModel):
    files: dict[str, str]
    mode: Mode
    batches: list[TunerBatch]
    wall_s: float
    """full, bounded: the run's wall. exhaustive: the warm phase's plus the timing phase's (the cold sample,
    which only feeds the users' estimate, left out)."""
    gpus: list[str]
    sample: int = 0
    seed: int = 0
    warm_s: float = 0.0
    """exhaustive: the warm phase's wall (every shard, every batch size)."""
    timing_s: float = 0.0
    """exhaustive: the timing phase's wall (a process per GPU)."""
    cold_s: float = 0.0
    """exhaustive: the cold sample's wall (not part of wall_s)."""
    warm_procs: int = 0
    """exhaustive: warm processes per GPU."""

    def users_wall(self) -> float | None:
        """Seconds SGLang's script takes as its users run it on these GPUs: it deals the batch sizes round-robin
        over one worker per GPU, each running its batch sizes one after another, so the slowest worker's sum
        (estimated from cold per-config costs except in full mode; None without an estimate at every size)."""
        estimates = [b.estimate() for b in self.batches]
        if not self.batches or any(e is None for e in estimates):
            return None
        workers = [0.0] * max(1, len(self.gpus))
        for i, (seconds, _) in enumerate(estimates):
            workers[i % len(workers)] += seconds
        return max(workers)


def earlier_runs(folders: list[Path], gpu: str, shape: str, tokens: list[int]) -> tuple[TunerRun, str]:
    """SGLang's tuner as earlier bar runs found it (each folder an OUT of benchmarks/moe_sglang_bar.py: its
    bar.jsonl header and tuner.json), for judging ours against its best without running it again: each batch size
    from the last folder that has it. A cold run's folder (--mode cold) gives no best: its sample replaces the cold
    costs of the batch sizes it has, for its users' wall. Refused in one line where a run was on another GPU or
    shape, or a batch size is in no run with a best. Returns the run (walls: the sums of the runs used) and a line
    saying where its figures come from."""
    found: dict[int, TunerBatch] = {}
    cold: dict[int, list[float]] = {}
    used: list[tuple[Path, dict, TunerRun]] = []
    for folder in folders:
        try:
            head = json.loads((folder / "bar.jsonl").read_text().splitlines()[0])
            run = TunerRun.model_validate_json((folder / "tuner.json").read_text())
        except (OSError, IndexError, ValueError) as exc:
            raise AstraError(f"no earlier bar run in {folder}: {exc}") from exc
        if head.get("gpu") != gpu or head.get("shape") != shape:
            raise AstraError(f"the bar run in {folder} was on {head.get('gpu')}, {head.get('shape')}; this one is on "
                             f"{gpu}, {shape}")
        mine = [b for b in run.batches if b.tokens in tokens]
        if run.mode == "cold":
            cold.update({b.tokens: b.cold_costs for b in mine if b.cold_costs})
        else:
            found.update({b.tokens: b for b in mine})
        if mine:
            used.append((folder, head, run))
    if missing := [t for t in tokens if t not in found]:
        raise AstraError(f"no earlier bar run given has batch size(s) {', '.join(map(str, missing))}")
    found = {t: b.model_copy(update={"cold_costs": cold[t]}) if t in cold else b for t, b in found.items()}
    runs = [r for _, _, r in used if r.mode != "cold"]
    run = TunerRun(files=runs[-1].files, mode=runs[-1].mode, batches=[found[t] for t in sorted(found)],
                   wall_s=sum(r.wall_s for r in runs), gpus=runs[-1].gpus, sample=runs[-1].sample, seed=runs[-1].seed,
                   warm_s=sum(r.warm_s for r in runs), timing_s=sum(r.timing_s for r in runs),
                   cold_s=sum(r.cold_s for _, _, r in used), warm_procs=runs[-1].warm_procs)
    where = "; ".join(f"{folder.name} ({head.get('date')}, commit {head.get('commit')}"
                      f"{', its cold sample' if r.mode == 'cold' else ''})" for folder, head, r in used)
    return run, f"SGLang's tuner was not run here: its figures are those of earlier runs on this GPU and shape: {where}."
