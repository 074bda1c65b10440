"""The asynchronous population: no round barrier. A round (one planner call, the drafts of its plans and their
lineages) starts whenever the GPUs would otherwise run dry, while earlier rounds are still being written,
repaired, profiled and measured; each round works on one island (round robin) and every `migrate_every`
rounds is offered the other islands' best kernels.

When to plan: every lineage alternates between waiting on the model (about L seconds a turn, the meter's mean)
and waiting on a GPU (about E seconds an evaluation, the pool's median), so G GPUs stay busy with about
G x (L + E) / E lineages in flight (Little's law; 50% slack), counting half of the drafts the rounds still
being planned will bring (they come two model calls later, when about as many lineages have ended). A round
is also started at once when the pool has fewer requests than GPUs and no round is being planned. At most
`inflight` lineages run at once (default 32 a GPU).

When to stop: the rounds budget (`rounds`, extended by a quarter each time a round in its last quarter finds a new
best, up to `max_rounds`); a plateau (`plateau` rounds closed in a row without a `plateau_gain` gain); the floor; a
dollar budget that the rounds in flight are expected to spend (no new round starts; the meter's hard stop
remains); or a deadline (`deadline_s`, or the benchmark's): the run stops then. Rounds already running finish (after a
stop they ask the model nothing more), so the run log stays whole and a resumed run (optimize/agents/journal.py)
redoes only what was cut off.
"""
from __future__ import annotations

import math
import statistics
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING

from astra_sglang.errors import AstraError
from astra_sglang.optimize.agents.prompts import StepFailed
from astra_sglang.optimize.agents.protocols import Pool
from astra_sglang.optimize.agents.steps import Stopped

if TYPE_CHECKING:
    from astra_sglang.optimize.agents.steps import Steps as Optimizer

DEFAULT_LLM_S = 30.0
DEFAULT_EVAL_S = 10.0
"""Latencies assumed until the run has measured its own."""
PER_GPU = 32
SLACK = 1.5
"""Lineages beyond Little's law's count: turns end in parse errors, lineages end, evaluations queue unevenly."""


def gpu_count(pool: Pool) -> int:
    count = len(pool.gpus) if isinstance(pool.gpus, list) else pool.gpus
    return max(count, 1)


class Population:
    def __init__(self, opt: "Optimizer", deadline: float | None = None):
        cfg = opt.config
        self.opt = opt
        self.deadline = deadline or (time.time() + cfg.deadline_s if cfg.deadline_s else None)
        self.budget, self.ceiling = cfg.rounds, cfg.max_rounds or 2 * cfg.rounds
        self.gpus = gpu_count(opt.pool)
        self.cap = cfg.inflight or PER_GPU * self.gpus
        self.flat = 0
        self.best = (opt.db.best().speedup or 0.0) if opt.db.best() else 0.0
        self.closed = 0

    # -- measurements ---------------------------------------------------------------------------------
    def eval_seconds(self) -> float:
        spans = [s.seconds for s in self.opt.pool.stats().evaluations[-50:]]
        return statistics.median(spans) if spans else DEFAULT_EVAL_S

    def llm_seconds(self) -> float:
        meter = self.opt.models.meter if self.opt.models else None
        return (meter.mean_seconds() if meter else None) or DEFAULT_LLM_S

    def target(self) -> int:
        """Lineages in flight that keep every GPU busy at the measured latencies (at most `inflight`)."""
        e, l = max(self.eval_seconds(), 0.05), self.llm_seconds()
        return min(self.cap, max(self.gpus + 1, math.ceil(SLACK * self.gpus * (l + e) / e)))

    def should_plan(self) -> bool:
        """Plan when the lineages in flight, with half of those the rounds being planned will bring, fall short of
        the target, or when a GPU is about to idle and no round is being planned."""
        opt = self.opt
        target = self.target()
        if opt.active + opt.drafting >= self.cap or opt.drafting >= max(opt.config.islands, target // 4):
            return False  # inflight=1 is the paper's loop: each round plans after the last one's result
        idle = opt.pool.pending() < self.gpus and opt.drafting == 0
        # half of what the rounds being planned will bring: they bring it two model calls from now, by when about
        # as many of the lineages in flight have ended
        coming = opt.active + opt.drafting * opt.config.population / 2
        return idle or coming < target

    # -- stops ----------------------------------------------------------------------------------------
    def affordable(self, running: int) -> bool:
        """False once the rounds in flight are expected to spend what is left of the dollar budget."""
        meter = self.opt.models.meter if self.opt.models else None
        if meter is None or meter.budget_usd is None or self.closed == 0:
            return True
        per_round = meter.total.cost_usd / max(self.closed, 1)
        return meter.total.cost_usd + per_round * (running + 1) <= meter.budget_usd

    def closed_round(self, r: int) -> None:
        """A round closed: the plateau count and the adaptive budget."""
        self.closed += 1
        best = self.opt.db.best()
        now = (best.speedup or 0.0) if best else 0.0
        cfg = self.opt.config
        if now > self.best * (1 + cfg.plateau_gain):
            self.best, self.flat = now, 0
            extend = cfg.rounds // 4  # a quarter more (none for a run of fewer than 4 rounds)
            if extend and r > self.budget - extend and self.budget < self.ceiling:
                self.budget = min(self.ceiling, self.budget + extend)
                self.opt.echo(f"new best late in the run ({best.id}, {now:.3f}x): {self.budget} rounds now")
        else:
            self.flat += 1
        if cfg.plateau and self.flat >= cfg.plateau:
            self.opt.halt(f"plateau: {self.flat} rounds in a row without a {cfg.plateau_gain:.0%} gain "
                          f"(best {self.best:.3f}x)")

    # -- the loop -------------------------------------------------------------------------------------
    def run(self) -> None:
        opt, log = self.opt, self.opt.log
        planned = {r.round for r in log.of_role("plan")} | {r.round for r in log.of_role("code") if r.round > 0}
        closed = {r.round for r in log.of_role("round") if r.round > 0}
        unfinished = sorted(r for r in planned if r not in closed)
        next_r = max(planned | closed, default=0) + 1
        running: dict[Future, int] = {}
        with ThreadPoolExecutor(max_workers=self.cap, thread_name_prefix="astra-lineage") as lineages, \
                ThreadPoolExecutor(max_workers=self.cap + 4, thread_name_prefix="astra-round") as rounds:
            opt.lineages = lineages
            for r in unfinished:  # a resumed run: the rounds a kill cut off, first
                running[rounds.submit(opt.round, r)] = r
            while True:
                for future in [f for f in running if f.done()]:
                    r = running.pop(future)
                    try:
                        future.result()
                    except (Stopped, StepFailed):
                        pass
                    self.closed_round(r)
                if opt.stop:
                    break
                at_floor = opt.db.at_floor(opt.config.roofline_margin)
                if at_floor is not None:
                    opt.halt(f"{at_floor.id} is within {opt.config.roofline_margin:.0%} of the floor at every shape")
                    break
                if self.deadline is not None and time.time() >= self.deadline:
                    opt.halt("time is up: the rounds' deadline passed")
                    break
                money = self.affordable(len(running))
                more = next_r <= self.budget and money
                if not money and not running:
                    meter = opt.models.meter
                    opt.halt(f"budget spent: ${meter.total.cost_usd:.4f} of ${meter.budget_usd:.4f} (another round "
                             f"would pass it: ${meter.total.cost_usd / max(self.closed, 1):.4f} a round so far)")
                    break
                if more and self.should_plan():
                    if opt.model is None:
                        raise AstraError("no model to continue the rounds with (pass --llm)")
                    opt.drafting += 1  # counted before the thread starts: the next check sees it
                    running[rounds.submit(opt.round, next_r, True)] = next_r
                    next_r += 1
                    continue
                if not running and not more:
                    break
                wait(list(running), timeout=0.5, return_when=FIRST_COMPLETED)
            for future in list(running):  # a stop: what is in flight ends (it asks the model nothing more)
                try:
                    future.result()
                except (Stopped, StepFailed):
                    pass
