"""Algorithm 1 of the Astra paper: test suite, baseline profile, then R rounds of plan -> code -> safety
check -> evaluate -> profile -> log; a final evaluation on held-out shapes picks the winner.

Every finished step is a line of RUN_DIR/rounds.jsonl carrying its typed output, and every step first
looks itself up there: `resume(run_dir, ...)` re-runs the same loop and only does what is missing, so a
killed run loses no round (the step that was cut off is redone; its LLM calls are the only repeat).
A spent budget or an endpoint that keeps failing stops the rounds cleanly; the final evaluation still
runs on what exists.
"""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable

from astra_sglang.agents.journal import RunLog, test_suite
from astra_sglang.agents.llm import BudgetExceeded, LLMError
from astra_sglang.agents.prompts import StepFailed
from astra_sglang.agents.protocols import Evaluator, Model, Profiler
from astra_sglang.agents.records import (CodeResult, HistoryRow, LogRecord, Plan, ProfileSummary, RoundContext,
                                         RunConfig, RunOutcome, Shape, TestPlan, Transcript, Usage, Winner)
from astra_sglang.agents.roles import CodingAgent, PlanningAgent, ProfilingAgent, SingleAgent, TestingAgent
from astra_sglang.agents.winner import FINAL_ROUND, classify, screen, select_winner, write_patch
from astra_sglang.errors import AstraError
from astra_sglang.harness.records import EvalRequest, EvalResult, KernelSource
from astra_sglang.specs.registry import get_spec, resolve_shapes


class Optimizer:
    def __init__(self, config: RunConfig, run_dir: str | Path, evaluator: Evaluator, model: Model | None,
                 profiler: Profiler | None = None, echo: Callable[[str], None] = lambda _: None):
        self.config, self.evaluator, self.model, self.profiler, self.echo = config, evaluator, model, profiler, echo
        self.spec = get_spec(config.kernel)
        self.dtypes = config.dtypes or list(self.spec.dtypes)
        self.log = RunLog(run_dir)
        self.log.save_config(config)
        self.baseline = self.log.candidate_path(0)
        if not self.baseline.exists():
            if not config.start_source or not Path(config.start_source).is_file():
                raise AstraError(f"start source not found: {config.start_source!r}")
            shutil.copyfile(config.start_source, self.baseline)
        if model is not None:
            model.meter.total = self.log.spent()
        self._open: Transcript | None = None
        self.profiling = ProfilingAgent(None if config.single_agent else model, self.spec, config)

    # -- steps ------------------------------------------------------------------------------------
    def _transcript(self, round: int, role: str) -> Transcript:
        self._open = Transcript(round=round, role=role)
        return self._open

    def _step(self, round: int, role: str, fn: Callable[[], LogRecord], key: str = "") -> LogRecord:
        """Memoized step: the logged record if this step already finished, else run it and log it."""
        done = self.log.find(round, role, key)
        if done is not None:
            return done
        record = fn()
        if self._open is not None and self._open.messages:
            self.log.save_transcript(self._open)
            record = record.model_copy(update={"usage": self._open.usage})
        self._open = None
        return self.log.append(record.model_copy(update={"round": round, "role": role, "key": key}))

    def suite(self) -> tuple[list[Shape], int]:
        return test_suite(self.spec, self.config, self.log)

    def evaluate(self, path: str | Path, label: str, shapes: list[Shape], trials: int) -> EvalResult:
        req = EvalRequest(kernel=self.spec.name, candidate=KernelSource(path=str(path), label=label),
                          baseline=KernelSource(path=self.config.baseline or str(self.baseline), label="baseline"),
                          shapes=shapes,
                          dtypes=self.dtypes, compile_only=self.config.compile_only, trials=trials,
                          arch=self.config.arch, timeout_s=self.config.timeout_s)
        result = self.evaluator(req)
        if result.build is not None and len(result.build.log) > 4000:
            build = result.build.model_copy(update={"log": result.build.log[-4000:]})
            result = result.model_copy(update={"build": build})
        return result

    def _eval_step(self, round: int, path: str, label: str) -> EvalResult:
        shapes, trials = self.suite()
        def evaluation() -> LogRecord:
            result = self.evaluate(path, label, shapes, trials)
            return LogRecord(round=round, role="eval", candidate=path, payload=result.model_dump(mode="json"))

        rec = self._step(round, "eval", evaluation)
        return EvalResult.model_validate(rec.payload)

    def _profile_step(self, round: int, path: str, result: EvalResult) -> ProfileSummary:
        def run() -> LogRecord:
            facts = self.profiler(path, result) if self.profiler is not None and result.ok else None
            summary = self.profiling.summarize(round, result, facts, self.dtypes, self._transcript(round, "profile"))
            return LogRecord(round=round, role="profile", payload=summary.model_dump(mode="json"))

        return ProfileSummary.model_validate(self._step(round, "profile", run).payload)

    # -- the algorithm ----------------------------------------------------------------------------
    def prepare(self) -> None:
        """Algorithm 1, steps 1-4: the TestingAgent extends T; the baseline is evaluated and profiled."""
        if not self.config.single_agent and self.model is not None:
            shapes, _ = self.suite()
            agent = TestingAgent(self.model, self.spec, self.config)

            def testing() -> LogRecord:
                try:
                    plan = agent.propose(self.baseline.read_text(), shapes, self.dtypes, self._transcript(0, "testing"))
                except StepFailed as exc:
                    plan = TestPlan(rejected=[f"no usable answer: {exc}"])
                return LogRecord(round=0, role="testing", payload=plan.model_dump(mode="json"),
                                 summary=f"+{len(plan.shapes)} shapes, {plan.trials} trials")

            self._step(0, "testing", testing)
        result = self._eval_step(0, str(self.baseline), "baseline")
        self._profile_step(0, str(self.baseline), result)
        self._close_round(0, str(self.baseline), result, "")

    def context(self, round: int) -> RoundContext:
        rows = [HistoryRow.model_validate(r.payload) for r in self.log.of_role("round") if 0 < r.round < round]
        best = max((h for h in rows if h.status == "ok" and (h.speedup or 0) > 1.0),
                   key=lambda h: h.speedup or 0, default=None)
        best_round = best.round if best else 0
        profile = self.log.find(best_round, "profile")
        last = next((h for h in rows if h.round == round - 1 and h.round != best_round), None)
        last_source, last_log = "", ""
        if last is not None:
            if last.status in ("build", "crash", "wrong", "timeout", "load", "failed"):
                path = self.log.candidate_path(last.round)
                last_source = path.read_text() if path.exists() else ""
            ev = self.log.find(last.round, "eval")
            if ev is not None and last.status == "build":
                build = (ev.payload.get("build") or {})
                last_log = (build.get("log") or "")[-2500:]
        shapes, _ = self.suite()
        source = self.log.candidate_path(best_round).read_text()
        return RoundContext(round=round, rounds=self.config.rounds, source=source,
                            best_round=best_round, best_speedup=best.speedup if best else None, history=rows,
                            last=last, last_source=last_source, last_log=last_log,
                            profile=ProfileSummary.model_validate(profile.payload).text if profile else "",
                            shapes=shapes, dtypes=self.dtypes)

    def round(self, r: int) -> None:
        """Algorithm 1, steps 8-16 for one round."""
        if self.log.find(r, "round") is not None:
            return
        ctx = self.context(r)
        path = str(self.log.candidate_path(r))
        if self.config.single_agent:
            code = CodeResult.model_validate(self._step(r, "single", lambda: self._single(ctx, path)).payload)
        else:
            planner = PlanningAgent(self.model, self.spec, self.config)
            coder = CodingAgent(self.model, self.spec, self.config)

            def planning() -> LogRecord:
                try:
                    plan = planner.plan(ctx, self._transcript(r, "plan"))
                except StepFailed as exc:
                    plan = Plan(text=f"(no plan: {exc}) Improve the current best kernel.")
                return LogRecord(round=r, role="plan", payload=plan.model_dump(mode="json"))

            plan = Plan.model_validate(self._step(r, "plan", planning).payload)

            def coding() -> LogRecord:
                try:
                    source = coder.write(ctx, plan, self._transcript(r, "code"))
                except StepFailed as exc:
                    return LogRecord(round=r, role="code", payload=CodeResult(error=str(exc)).model_dump(mode="json"))
                self.log.save_candidate(r, source)
                payload = CodeResult(candidate=path).model_dump(mode="json")
                return LogRecord(round=r, role="code", candidate=path, payload=payload)

            code = CodeResult.model_validate(self._step(r, "code", coding).payload)
        result = None
        if code.candidate:
            result = self._eval_step(r, code.candidate, f"r{r:02d}")
            self._profile_step(r, code.candidate, result)
        self._close_round(r, code.candidate, result, code.error)

    def _single(self, ctx: RoundContext, path: str) -> LogRecord:
        try:
            agent = SingleAgent(self.model, self.spec, self.config)
            code, source = agent.step(ctx, path, self._transcript(ctx.round, "single"))
        except StepFailed as exc:
            return LogRecord(round=ctx.round, role="single", payload=CodeResult(error=str(exc)).model_dump(mode="json"))
        self.log.save_candidate(ctx.round, source)
        return LogRecord(round=ctx.round, role="single", candidate=path, payload=code.model_dump(mode="json"))

    def _close_round(self, r: int, path: str | None, result: EvalResult | None, error: str) -> None:
        row = classify(r, result, error)
        summary = f"r{r:02d} {row.status}" + (f" {row.speedup:.3f}x" if row.speedup else "")
        summary += f": {row.detail}" if row.detail else ""
        self._step(r, "round", lambda: LogRecord(round=r, role="round", candidate=path, summary=summary[:300],
                                                 payload=row.model_dump(mode="json")))
        self.echo(summary[:200])

    def final(self) -> Winner | None:
        """The best correct candidates, evaluated again on T + never-seen shapes; the best passing one wins."""
        if self.config.compile_only:
            return None
        rows = [HistoryRow.model_validate(r.payload) for r in self.log.of_role("round") if r.round > 0]
        finalists = sorted((h for h in rows if h.status == "ok"), key=lambda h: -(h.speedup or 0))
        finalists = finalists[: self.config.finalists]
        shapes, trials = self.suite()
        shapes += [s for s in resolve_shapes(self.spec, self.config.final_shapes) if s not in shapes]
        finals: dict[int, EvalResult] = {}
        prebuild = getattr(self.evaluator, "prebuild", None)  # the harness's: every finalist built in parallel
        if prebuild is not None:
            prebuild([(str(self.log.candidate_path(h.round)), {}, self.config.arch) for h in finalists])
        for h in finalists:
            path = self.log.candidate_path(h.round)
            label = f"r{h.round:02d}"

            def evaluation() -> LogRecord:
                result = self.evaluate(path, label, shapes, trials)
                return LogRecord(round=FINAL_ROUND, role="final", candidate=str(path),
                                 payload=result.model_dump(mode="json"))

            rec = self._step(FINAL_ROUND, "final", evaluation, key=label)
            finals[h.round] = EvalResult.model_validate(rec.payload)
        sources = {h.round: str(self.log.candidate_path(h.round)) for h in finalists}
        while finals:  # the best eligible finalist that compute-sanitizer finds nothing in
            winner = select_winner(self.spec.name, finals, sources,
                                   self.config, self.model.name if self.model else "", self.log.dir.name)
            if winner is None:
                return None
            screened = screen(winner, self.spec, self.echo)
            if screened is not None:
                return screened
            finals.pop(winner.round)
        return None

    def run(self) -> RunOutcome:
        stop = ""
        try:
            self.prepare()
            for r in range(1, self.config.rounds + 1):
                if self.model is None and self.log.find(r, "round") is None:
                    raise AstraError("no model to continue the rounds with (pass --llm)")
                self.round(r)
        except (BudgetExceeded, LLMError) as exc:
            stop = str(exc)
            partial = self._open.usage if self._open is not None else Usage()
            if self._open is not None and self._open.messages:
                self.log.save_transcript(self._open)
            self._open = None
            self.log.append(LogRecord(round=len(self.log.of_role("round")), role="stop", summary=stop[:300],
                                      usage=partial))
            self.echo(f"stopped: {stop}")
        winner = self.final()
        if winner is not None:
            write_patch(winner, self.log.dir / "patch", self.spec)
        from astra_sglang.agents.report import write_report  # matplotlib is optional and slow to import

        report = write_report(self.log.dir, self.spec, winner)
        rounds_done = max((r.round for r in self.log.of_role("round")), default=0)
        return RunOutcome(run_dir=str(self.log.dir), winner=winner, rounds_done=rounds_done, stop_reason=stop,
                          usage=self.log.spent(), report=str(report))


def run(config: RunConfig, run_dir: str | Path, evaluator: Evaluator, model: Model | None,
        profiler: Profiler | None = None, echo: Callable[[str], None] = lambda _: None) -> RunOutcome:
    return Optimizer(config, run_dir, evaluator, model, profiler, echo).run()


def resume(run_dir: str | Path, evaluator: Evaluator, model: Model | None, profiler: Profiler | None = None,
           echo: Callable[[str], None] = lambda _: None, **overrides) -> RunOutcome:
    """Continue a run from its rounds.jsonl (overrides: e.g. rounds=8 to extend it)."""
    config = RunLog.load_config(run_dir).model_copy(update=overrides)
    return Optimizer(config, run_dir, evaluator, model, profiler, echo).run()
