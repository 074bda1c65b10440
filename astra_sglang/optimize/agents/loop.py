"""The population loop: Astra's agents (testing, profiling, planning, coding) over a scored database.

prepare: the start kernel is evaluated first, and a run whose baseline cannot be evaluated stops there,
before any LLM call; then the TestingAgent extends the suite and the baseline is profiled. Each round:
the PlanningAgent, shown the database's diverse best kernels, its past plans with their per-shape
results, the GPU's facts and the best kernel's bottleneck, writes up to `plans` plans on parents it picks;
the CodingAgent drafts `population` candidates (n samples a plan); each candidate is built, checked and
timed through the pool and repaired in its own conversation up to `repairs` times (optimize/agents/lineage.py),
all candidates in flight at once. A new best kernel is profiled. The rounds stop early once the best is
within `roofline_margin` of the floor at every shape; optimize/agents/final.py picks the winner. population=1,
plans=1, repairs=0 is the paper's Algorithm 1.

Every finished step is a line of RUN_DIR/rounds.jsonl and every step first looks itself up there, so
`resume` redoes only what a kill cut off. A spent budget or a dead endpoint stops the rounds cleanly.
"""
from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

from astra_sglang.errors import AstraError
from astra_sglang.harness.records import EvalResult
from astra_sglang.optimize.agents.bottleneck import Bottleneck, bottleneck
from astra_sglang.optimize.agents.context import RoundContext, history, past_plans, source_of
from astra_sglang.optimize.agents.database import ORIGINAL, Entry, entry_from, shape_key
from astra_sglang.optimize.agents.journal import RunLog, step_key
from astra_sglang.optimize.agents.lineage import Lineage
from astra_sglang.optimize.agents.prompts import StepFailed
from astra_sglang.optimize.agents.protocols import Model, Profiler
from astra_sglang.optimize.agents.roles import CodingAgent, PlanningAgent, ProfilingAgent, TestingAgent
from astra_sglang.optimize.agents.steps import Steps, Stopped
from astra_sglang.optimize.records import (Drafts, HistoryRow, LogRecord, PlanItem, PlanSet, ProfileSummary, RunConfig,
                                           RunOutcome, TestPlan, Transcript)
from astra_sglang.optimize.winner import passed, write_patch

GENERIC_PLAN = "Make the current best kernel faster at the shapes where it is furthest from the floor."


class BaselineFailed(AstraError):
    """The start kernel could not be evaluated: nothing to compare candidates with, so no LLM is asked."""


def _result(future):
    """A lineage's or a draft group's result; a stop inside it (already logged) yields None."""
    try:
        return future.result()
    except (Stopped, StepFailed):
        return None


class Optimizer(Steps):
    def __init__(self, config: RunConfig, run_dir: str | Path, pool, model: Model | None,
                 profiler: Profiler | None = None, echo: Callable[[str], None] = lambda _: None):
        super().__init__(config, run_dir, pool, model, profiler, echo)
        self.profiling = ProfilingAgent(None if config.single_agent else model, self.spec, config)

    # -- the algorithm ----------------------------------------------------------------------------
    def prepare(self) -> EvalResult:
        """The baseline first (no LLM spending when it cannot be evaluated), then the TestingAgent."""
        shapes, trials = self.suite()
        rec = self.step(0, "eval", lambda _: LogRecord(round=0, role="eval", candidate=str(self.baseline), payload=(
            self.trim(self.pool.submit(self.request(self.baseline, "baseline", shapes, trials)).result())
            .model_dump(mode="json"))))
        result = EvalResult.model_validate(rec.payload)
        self.db.add(entry_from(ORIGINAL, 0, str(self.baseline), self.baseline.read_text(), result))
        original = self.db.get(ORIGINAL)
        if not (passed(result) or (self.config.compile_only and original.status == "compiled")):
            raise BaselineFailed(f"the start kernel could not be evaluated ({original.status}: {original.detail})")
        self.gpu = self.pool.gpu_facts().with_results([result])
        self.gpu.arch = self.gpu.arch or self.config.arch or "sm_90"
        if not self.config.single_agent and self.model is not None:
            agent = TestingAgent(self.model, self.spec, self.config)

            def testing(t: Transcript) -> LogRecord:
                try:
                    plan = agent.propose(self.baseline.read_text(), shapes, self.dtypes, t)
                except StepFailed as exc:
                    plan = TestPlan(rejected=[f"no usable answer: {exc}"])
                return LogRecord(round=0, role="testing", payload=plan.model_dump(mode="json"),
                                 summary=f"+{len(plan.shapes)} shapes, {plan.trials} trials")

            self.step(0, "testing", testing)
        self._profile(0, original, result)
        self._close_round(0, [original])
        return result

    def _profile(self, round: int, entry: Entry, result: EvalResult) -> None:
        def run(t: Transcript) -> LogRecord:
            library = result.build.library if result.build else ""
            local = self.profiler is not None and result.ok and library and Path(library).is_file()
            # on a GPU worker, alone on its GPU: ncu's replays must not overlap another candidate's timing
            facts = self.pool.exclusive(self.profiler, entry.source, result).result() if local else None
            summary = self.profiling.summarize(round, result, facts, self.dtypes, t)
            payload = {**summary.model_dump(mode="json"), "bottleneck": bottleneck(result, facts).model_dump()}
            return LogRecord(round=round, role="profile", candidate=entry.source, payload=payload)

        try:
            self.step(round, "profile", run, entry.id)
        except StepFailed:
            pass  # a summary the model could not write: the planner goes on with the rule-based facts

    def context(self, r: int) -> RoundContext:
        best = self.db.best()
        shapes, _ = self.suite()
        prof = self.log.find(best.round, "profile", best.id) or self.log.find(0, "profile", ORIGINAL)
        return RoundContext(
            round=r, rounds=self.config.rounds, best=best, source=source_of(best),
            elites=self.db.elites(self.config.elites), plans=past_plans(self.log, self.db, r),
            history=history(self.log),
            keys=[shape_key(s, d) for d in self.dtypes for s in shapes], gpu=self.gpu,
            bottleneck=Bottleneck.model_validate(prof.payload["bottleneck"]) if prof and "bottleneck" in prof.payload
            else None, profile=ProfileSummary.model_validate(prof.payload).text if prof else "",
            shapes=shapes, dtypes=self.dtypes, population=self.config.population, plans_wanted=self.config.plans)

    def round(self, r: int) -> None:
        if self.log.find(r, "round") is not None:
            return
        ctx, coder = self.context(r), CodingAgent(self.model, self.spec, self.config)
        if self.config.single_agent:
            groups = [(None, ctx.best, coder.single_prompt(ctx), self.config.population)]
        else:
            plans = PlanSet.model_validate(self.step(r, "plan", lambda t: self._plan(ctx, t)).payload).plans
            counts = [len(range(j, self.config.population, len(plans))) for j in range(len(plans))]
            groups = []
            for j, (plan, n) in enumerate(zip(plans, counts)):
                parent = self.db.get(plan.parent) or ctx.best
                groups.append((j, parent, coder.prompt(ctx, plan, parent, source_of(parent)), n))
        firsts = [sum(g[3] for g in groups[:j]) for j in range(len(groups))]  # plan j's candidates: c<first>...
        with ThreadPoolExecutor(max_workers=self.config.population) as lineages, \
                ThreadPoolExecutor(max_workers=len(groups)) as drafting:
            def group(j, parent, prompt, n, first):
                try:
                    answers = self._drafts(r, j or 0, prompt, n)
                except StepFailed as exc:
                    self.echo(f"r{r:02d} plan {j or 0}: no drafts ({exc})"[:200])
                    return []
                return [lineages.submit(Lineage(self, r, first + i, prompt, a, parent.id, j).run)
                        for i, a in enumerate(answers)]

            futures = [f for g in [drafting.submit(group, *g, first) for g, first in zip(groups, firsts)]
                       for f in (_result(g) or [])]
            entries = [e for e in (_result(f) for f in futures) if isinstance(e, Entry)]
        best = max((e for e in entries if e.ok), key=lambda e: e.speedup or 0, default=None)
        if best is not None and best.id == self.db.best().id:
            self._profile(r, best, EvalResult.model_validate(self.log.find(r, "eval", step_key(best.id)).payload))
        if not self.stop:
            self._close_round(r, entries)

    def _plan(self, ctx: RoundContext, t: Transcript) -> LogRecord:
        try:
            plans = PlanningAgent(self.model, self.spec, self.config).plan(ctx, t)
        except StepFailed as exc:
            plans = PlanSet(plans=[PlanItem(parent=ctx.best.id, text=f"(no plan: {exc}) {GENERIC_PLAN}")])
        return LogRecord(round=ctx.round, role="plan", payload=plans.model_dump(mode="json"),
                         summary=f"{len(plans.plans)} plan(s)")

    def _drafts(self, r: int, j: int, prompt, n: int) -> list[str]:
        if n <= 0:
            return []

        def draft(t: Transcript) -> LogRecord:
            self.check_stop()
            t.messages = list(prompt)
            replies = self.model.sample(prompt, n, tag=f"r{r:02d} coding p{j}")
            for reply in replies:
                t.usage = t.usage + reply.usage
            return LogRecord(round=r, role="draft", payload=Drafts(answers=[x.content for x in replies]).model_dump())

        return Drafts.model_validate(self.step(r, "draft", draft, f"p{j}").payload).answers

    def _close_round(self, r: int, entries: list[Entry]) -> None:
        counts = Counter(e.status for e in entries)
        best = max((e for e in entries if e.ok), key=lambda e: e.speedup or 0, default=None)
        status = "ok" if best else (counts.most_common(1)[0][0] if counts else "stopped")
        detail = ", ".join(f"{n} {s}" for s, n in counts.most_common())
        if r > 0:
            detail = f"{len(entries)} candidates ({detail}), {sum(e.attempts - 1 for e in entries)} repairs" + (
                f"; best {best.id}" if best else "")
        row = HistoryRow(round=r, status=status, speedup=best.speedup if best else None, detail=detail)
        summary = f"r{r:02d} {row.status}" + (f" {row.speedup:.3f}x" if row.speedup else "") + f": {detail}"
        self.step(r, "round", lambda _: LogRecord(round=r, role="round", summary=summary[:300],
                                                  payload=row.model_dump(mode="json")))
        self.echo(summary[:200])

    def run(self) -> RunOutcome:
        baseline_error = ""
        try:
            self._rebuild()
            self.prepare()
            for r in range(1, self.config.rounds + 1):
                if self.stop:
                    break
                at_floor = self.db.at_floor(self.config.roofline_margin)
                if at_floor is not None and self.log.find(r, "round") is None:
                    self.halt(f"{at_floor.id} is within {self.config.roofline_margin:.0%} of the floor at every shape")
                    break
                if self.model is None and self.log.find(r, "round") is None:
                    raise AstraError("no model to continue the rounds with (pass --llm)")
                self.round(r)
        except Stopped:
            pass
        except BaselineFailed as exc:
            baseline_error = str(exc)
            self.halt(f"{exc}; no LLM was asked")
        from astra_sglang.optimize.agents.final import finish
        from astra_sglang.optimize.agents.report import write_report  # matplotlib is optional and slow to import

        try:
            winner = None if baseline_error else finish(self)
        finally:
            if self._own_pool:
                self.pool.close()
        if winner is not None:
            write_patch(winner, self.log.dir / "patch", self.spec)
        report = write_report(self.log.dir, self.spec, winner)
        rounds_done = max((r.round for r in self.log.of_role("round")), default=0)
        return RunOutcome(run_dir=str(self.log.dir), winner=winner, rounds_done=rounds_done, stop_reason=self.stop,
                          usage=self.log.spent(), report=str(report), baseline_error=baseline_error)


def run(config: RunConfig, run_dir: str | Path, pool, model: Model | None, profiler: Profiler | None = None,
        echo: Callable[[str], None] = lambda _: None) -> RunOutcome:
    """One optimization run. `pool`: a LocalPool / RayPool, or a bare evaluator (one at a time)."""
    return Optimizer(config, run_dir, pool, model, profiler, echo).run()


def resume(run_dir: str | Path, pool, model: Model | None, profiler: Profiler | None = None,
           echo: Callable[[str], None] = lambda _: None, **overrides) -> RunOutcome:
    """Continue a run from its rounds.jsonl (overrides: e.g. rounds=8 to extend it)."""
    config = RunLog.load_config(run_dir).model_copy(update=overrides)
    return Optimizer(config, run_dir, pool, model, profiler, echo).run()
