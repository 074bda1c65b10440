"""The agent loop: Astra's agents (testing, profiling, planning, coding, reflecting) over a scored database,
as an asynchronous population (optimize/agents/population.py).

prepare: the start kernel is evaluated first, and a run whose baseline cannot be evaluated stops there,
before any LLM call; then the TestingAgent extends the suite and the baseline is profiled. A round: the
PlanningAgent, shown its island's diverse best kernels, the run's memory of plans and what each candidate
of them measured turn by turn, lessons from earlier runs, the GPU's facts and the best kernel's bottleneck,
writes up to `plans` plans on parents it picks; the CodingAgent, shown the parent's profile, bottleneck and
failures, drafts `population` candidates (n samples a plan); each candidate is a lineage
(optimize/agents/lineage.py) of repairs and speed turns, measured through the pool, profiled where the budget
allows, reflected on at its end. Rounds overlap: a new one starts whenever the GPUs would run dry.
optimize/agents/final.py picks the winner. population=1, plans=1, repairs=0, speed_turns=0, islands=1,
inflight=1, reflect off is the paper's Algorithm 1.

Every finished step is a line of RUN_DIR/rounds.jsonl and every step first looks itself up there, so
`resume` redoes only what a kill cut off. A spent budget or a dead endpoint stops the run cleanly.
"""
from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

from astra_sglang.errors import AstraError
from astra_sglang.harness.records import EvalResult
from astra_sglang.optimize.agents.context import CoderContext, RoundContext, failures_on, history, source_of
from astra_sglang.optimize.agents.database import ORIGINAL, Entry, entry_from, shape_key
from astra_sglang.optimize.agents.journal import RunLog
from astra_sglang.optimize.agents.lineage import Lineage
from astra_sglang.optimize.agents.memory import Memory, PastPlan, past_plans
from astra_sglang.optimize.agents.models import Models
from astra_sglang.optimize.agents.prompts import StepFailed
from astra_sglang.optimize.agents.profiles import Profiles
from astra_sglang.optimize.agents.protocols import Model, Profiler
from astra_sglang.optimize.agents.roles import CodingAgent, PlanningAgent, ProfilingAgent, TestingAgent
from astra_sglang.optimize.agents.steps import Steps, Stopped
from astra_sglang.optimize.agents.store import op_kind
from astra_sglang.optimize.records import (Drafts, HistoryRow, LogRecord, PlanItem, PlanSet, RunConfig, RunOutcome,
                                           TestPlan, Transcript)
from astra_sglang.optimize.winner import passed, write_patch

GENERIC_PLAN = "Make the current best kernel faster at the shapes where it is furthest from the floor."


class BaselineFailed(AstraError):
    """The start kernel could not be evaluated: nothing to compare candidates with, so no LLM is asked."""


def _result(future):
    """A lineage's result; a stop inside it (already logged) yields None."""
    try:
        return future.result()
    except (Stopped, StepFailed):
        return None


class Optimizer(Steps):
    def __init__(self, config: RunConfig, run_dir: str | Path, pool, model: Model | Models | None,
                 profiler: Profiler | None = None, echo: Callable[[str], None] = lambda _: None):
        super().__init__(config, run_dir, pool, model, profiler, echo)
        writer = None if config.single_agent or self.models is None else self.models("profiler")
        self.profiling = ProfilingAgent(writer, self.spec, config)
        self.profiles = Profiles(self)
        self.memory = Memory(self)
        self.lineages: ThreadPoolExecutor | None = None
        """Where lineages run (the population's executor; a round on its own makes one)."""
        self.active = 0
        """Lineages in flight."""
        self.drafting = 0
        """Rounds whose plans or drafts are still being written."""
        self._count = threading.Lock()

    # -- the start --------------------------------------------------------------------------------
    def prepare(self) -> EvalResult:
        """The baseline first (no LLM spending when it cannot be evaluated), then the TestingAgent."""
        shapes, trials = self.suite()
        # from nothing: S0 declines every shape, so the original measured is the baseline op itself
        subject = self.config.baseline if self.config.from_nothing else self.baseline
        rec = self.step(0, "eval", lambda _: LogRecord(round=0, role="eval", candidate=str(self.baseline), payload=(
            self.trim(self.pool.submit(self.request(subject, "baseline", shapes, trials)).result())
            .model_dump(mode="json"))))
        result = EvalResult.model_validate(rec.payload)
        self.db.add(entry_from(ORIGINAL, 0, str(self.baseline), self.baseline.read_text(), result))
        original = self.db.get(ORIGINAL)
        if not (passed(result) or (self.config.compile_only and original.status == "compiled")):
            raise BaselineFailed(f"the start kernel could not be evaluated ({original.status}: {original.detail})")
        self.gpu = self.pool.gpu_facts().with_results([result])
        self.gpu.arch = self.gpu.arch or self.config.arch or "sm_90"
        if not self.config.single_agent and self.models is not None:
            agent = TestingAgent(self.models("tester"), self.spec, self.config)

            def testing(t: Transcript) -> LogRecord:
                try:
                    plan = agent.propose(self.baseline.read_text(), shapes, self.dtypes, t)
                except StepFailed as exc:
                    plan = TestPlan(rejected=[f"no usable answer: {exc}"])
                return LogRecord(round=0, role="testing", payload=plan.model_dump(mode="json"),
                                 summary=f"+{len(plan.shapes)} shapes, {plan.trials} trials")

            self.step(0, "testing", testing)
        self.profiles.profile(original, result, new_best=True, summarize=True)
        self._close_round(0, [original])
        return result

    # -- what the agents read ---------------------------------------------------------------------
    def context(self, r: int, island: int, past: list[PastPlan]) -> RoundContext:
        """The planner's view of round r on `island`; `past`: the run's plans so far (past_plans)."""
        best = self.db.best()
        shapes, _ = self.suite()
        migrants: list[str] = []
        if self.config.islands > 1 and r % self.config.migrate_every == 0:
            others = {e.island: e for e in reversed(self.db.correct()) if e.island != island and e.id != ORIGINAL}
            migrants = [e.id for e in sorted(others.values(), key=lambda e: e.island)]
        elites = self.db.elites(self.config.elites, island=island if self.config.islands > 1 else None,
                                migrants=tuple(migrants))
        digest, plans = self.memory.view(past)
        prof = self.profiles.get(best) or self.profiles.get(self.db.get(ORIGINAL))
        lessons = self.store.relevant(self.spec.name, op_kind(self.spec), self.gpu.arch,
                                      exclude_run=str(self.log.dir.resolve())) if self.config.memory else []
        return RoundContext(
            round=r, rounds=self.config.rounds, best=best, source=source_of(best), island=island,
            islands=self.config.islands, elites=elites, migrants=migrants, digest=digest, plans=plans,
            lessons=lessons, history=history(self.log), keys=[shape_key(s, d) for d in self.dtypes for s in shapes],
            gpu=self.gpu, bottleneck=prof.bottleneck if prof else None, profile=prof.summary.text if prof else "",
            hotspots=prof.ncu.hotspots if prof else [], shapes=shapes, dtypes=self.dtypes,
            population=self.config.population, plans_wanted=self.config.plans)

    def coder_context(self, parent: Entry) -> CoderContext:
        prof = self.profiles.get(parent)
        child, changes = self.profiles.changes(parent)
        return CoderContext(parent=parent, source=source_of(parent), profile=prof.summary.text if prof else "",
                            bottleneck=prof.bottleneck if prof else None, hotspots=prof.ncu.hotspots if prof else [],
                            child=child, changes=changes, failures=failures_on(self.db, parent.id))

    # -- a round ----------------------------------------------------------------------------------
    def round(self, r: int, counted: bool = False) -> list[Entry]:
        """Round r: its plans, their drafts and every lineage of them, to the end; logged as closed."""
        if not counted:
            with self._count:
                self.drafting += 1
        try:
            groups = self._groups(r)
        except BaseException:
            with self._count:
                self.drafting -= 1
            raise
        own = self.lineages is None
        pool = ThreadPoolExecutor(max_workers=max(1, self.config.population)) if own else self.lineages
        futures = []
        try:
            with self._count:  # the lineages count before the round stops counting as drafting
                self.active += sum(len(g[4]) for g in groups)
                self.drafting -= 1
            first, island = 0, (r - 1) % self.config.islands
            for j, parent, prompt, plan, answers in groups:
                for i, answer in enumerate(answers):
                    lineage = Lineage(self, r, first + i, prompt, answer, parent.id, j, plan, island)
                    futures.append(pool.submit(self._lineage, lineage))
                first += len(answers)
            entries = [e for e in (_result(f) for f in futures) if isinstance(e, Entry)]
        finally:
            if own:
                pool.shutdown(wait=True)
        if not self.stop:
            self._close_round(r, entries)
        return entries

    def _lineage(self, lineage: Lineage) -> Entry | None:
        counted = [True]

        def release() -> None:
            with self._count:
                if counted[0]:
                    self.active, counted[0] = self.active - 1, False

        lineage.measured = release
        try:
            return lineage.run()
        finally:
            release()

    def _groups(self, r: int):
        """(plan index, parent, prompt, plan, drafts) per plan of round r; drafts asked in parallel."""
        coder, island = CodingAgent(self.models("coder"), self.spec, self.config), (r - 1) % self.config.islands
        if self.config.single_agent:
            ctx = self.context(r, island, past_plans(self.log, self.db))
            specs = [(None, ctx.best, coder.single_prompt(ctx), "", self.config.population)]
        else:
            plans = PlanSet.model_validate(self.step(r, "plan", lambda t: self._plan(r, island, t)).payload)
            counts = [len(range(j, self.config.population, len(plans.plans))) for j in range(len(plans.plans))]
            specs = []
            for j, (plan, n) in enumerate(zip(plans.plans, counts)):
                parent = self.db.get(plan.parent) or self.db.best()
                item = PlanItem(parent=parent.id, text=plan.text, key=plan.key)
                prompt = coder.prompt(self.context_light(r), item, self.coder_context(parent))
                specs.append((j, parent, prompt, plan.text, n))
        with ThreadPoolExecutor(max_workers=len(specs)) as drafting:
            drafts = [drafting.submit(self._drafts, r, j or 0, prompt, n) for j, _, prompt, _, n in specs]
            out = []
            for (j, parent, prompt, plan, _), future in zip(specs, drafts):
                try:
                    answers = future.result()
                except StepFailed as exc:
                    self.echo(f"r{r:02d} plan {j or 0}: no drafts ({exc})"[:200])
                    answers = []
                out.append((j, parent, prompt, plan, answers))
        return out

    def context_light(self, r: int) -> RoundContext:
        """What the coder's prompt needs of a round (not the planner's whole view)."""
        return RoundContext(round=r, rounds=self.config.rounds, best=self.db.best(), source="", gpu=self.gpu,
                            dtypes=self.dtypes)

    def _plan(self, r: int, island: int, t: Transcript) -> LogRecord:
        past = past_plans(self.log, self.db)  # read once: the planner's view and its repeat check share it
        ctx = self.context(r, island, past)
        try:
            plans = PlanningAgent(self.models("planner"), self.spec, self.config).plan(ctx, t, past)
        except StepFailed as exc:
            plans = PlanSet(plans=[PlanItem(parent=ctx.best.id, text=f"(no plan: {exc}) {GENERIC_PLAN}")],
                            island=island)
        return LogRecord(round=r, role="plan", payload=plans.model_dump(mode="json"),
                         summary=f"island {island}: {len(plans.plans)} plan(s)"
                                 + (f", {len(plans.dropped)} repeat(s) left out" if plans.dropped else ""))

    def _drafts(self, r: int, j: int, prompt, n: int) -> list[str]:
        if n <= 0:
            return []

        def draft(t: Transcript) -> LogRecord:
            self.check_stop()
            t.messages = list(prompt)
            replies = self.models("coder").sample(prompt, n, tag=f"r{r:02d} coding p{j}")
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
            cands = [self.log.find(r, "cand", e.id.split("-")[1]) for e in entries]
            turns = sum(c.payload.get("attempts", 1) - 1 for c in cands if c is not None)
            detail = f"{len(entries)} candidates ({detail}), {turns} repair/speed turns" + (
                f"; best {best.id}" if best else "")
        row = HistoryRow(round=r, status=status, speedup=best.speedup if best else None, detail=detail)
        summary = f"r{r:02d} {row.status}" + (f" {row.speedup:.3f}x" if row.speedup else "") + f": {detail}"
        self.step(r, "round", lambda _: LogRecord(round=r, role="round", summary=summary[:300],
                                                  payload=row.model_dump(mode="json")))
        self.echo(summary[:200])

    # -- the run ----------------------------------------------------------------------------------
    def run(self) -> RunOutcome:
        from astra_sglang.optimize.agents.population import Population

        baseline_error = ""
        try:
            self._rebuild()
            self.prepare()
            Population(self).run()
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


def run(config: RunConfig, run_dir: str | Path, pool, model: Model | Models | None, profiler: Profiler | None = None,
        echo: Callable[[str], None] = lambda _: None) -> RunOutcome:
    """One optimization run. `pool`: a LocalPool / RayPool, or a bare evaluator (one at a time); `model`: one
    model for every role, or Models (a model per role)."""
    return Optimizer(config, run_dir, pool, model, profiler, echo).run()


def resume(run_dir: str | Path, pool, model: Model | Models | None, profiler: Profiler | None = None,
           echo: Callable[[str], None] = lambda _: None, **overrides) -> RunOutcome:
    """Continue a run from its rounds.jsonl (overrides: e.g. rounds=8 to extend it)."""
    config = RunLog.load_config(run_dir).model_copy(update=overrides)
    return Optimizer(config, run_dir, pool, model, profiler, echo).run()
