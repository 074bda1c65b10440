"""One candidate lineage, from its first draft through its repairs and speed turns, in its own conversation.

Attempt 0 is the coder's draft (one of the n samples of its plan's prompt). Each attempt is parsed and
safety-checked, then built, checked and timed through the pool. A failure goes back to the same
conversation with what went wrong, up to `repairs` times. A correct kernel that is slower than its parent,
or far from the floor, goes back too, up to `speed_turns` times, with its per-shape timings against its
parent's and the floor and, where Nsight Compute looked at it (optimize/agents/profiles.py), the metrics
that moved from the parent and its stall hotspots: a lineage does not end at its first correct kernel. Its
best correct attempt (else its last) is the lineage's result; the reflector then says what it taught.
Every step is a memoized record of the run log, so a resumed run re-asks nothing that was answered and
re-evaluates nothing that was evaluated.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from astra_sglang.harness.records import EvalResult
from astra_sglang.harness.safety import UnsafeCode
from astra_sglang.optimize.agents.database import ORIGINAL, Entry
from astra_sglang.optimize.agents.feedback import repair_message, shape_rows, speed_message, why_slow
from astra_sglang.optimize.agents.journal import candidate_id, step_key
from astra_sglang.optimize.agents.llm import RequestRejected
from astra_sglang.optimize.agents.parse import ParseError, strip_code
from astra_sglang.optimize.agents.profiling import choose_metrics, metric_changes
from astra_sglang.optimize.agents.reflect import reflect, remember
from astra_sglang.optimize.agents.roles import parse_kernel, single_shapes
from astra_sglang.optimize.records import CodeResult, HistoryRow, LogRecord, Message, Shape, Transcript

if TYPE_CHECKING:
    from astra_sglang.optimize.agents.steps import Steps as Optimizer

FINAL = ("compiled", "failed")
"""Statuses nothing can change: a build with nothing to run on, a baseline problem."""


class Lineage:
    def __init__(self, opt: "Optimizer", round: int, slot: int, prompt: list[Message], draft: str, parent: str,
                 plan_index: int | None, plan: str = "", island: int = 0):
        self.opt, self.round, self.slot = opt, round, slot
        self.prompt, self.draft, self.parent, self.plan_index = prompt, draft, parent, plan_index
        self.plan, self.island = plan, island
        self.measured = lambda: None
        """Called once the lineage will ask the GPU for nothing more (its reflection is still to come): the
        population then counts it out of what keeps the GPUs busy."""

    def key(self, attempt: int) -> str:
        return f"c{self.slot}a{attempt}"

    def run(self) -> Entry | None:
        """The lineage's best correct attempt (else its last) as a database entry; None when the run stopped
        before it finished."""
        opt, entry, attempts = self.opt, None, []
        messages = [*self.prompt, Message(role="assistant", content=self.draft)]
        repairs, speeds = opt.config.repairs, opt.config.speed_turns
        for attempt in range(opt.config.repairs + opt.config.speed_turns + 1):
            if attempt > 0:
                messages = self._continue(attempt, messages, follow)
                if messages is None:
                    return None
            code = CodeResult.model_validate(
                opt.step(self.round, "code", lambda t: self._code(attempt, messages, t), self.key(attempt)).payload)
            result = self._evaluate(attempt, code) if code.candidate else None
            entry = opt.enter(self.round, self.slot, attempt, code, result)
            attempts.append(entry)
            follow = self._next(entry, result, repairs, speeds)
            if follow is None:
                break
            repairs, speeds = (repairs - 1, speeds) if follow[0] == "repair" else (repairs, speeds - 1)
        self.measured()
        best = max((e for e in attempts if e.ok), key=lambda e: (e.speedup or 0, -e.attempts), default=entry)
        parent = opt.db.get(self.parent)
        reflection = reflect(opt, self.round, self.slot, self.plan, parent, attempts, best)
        remember(opt, self.plan, parent, best, reflection)
        opt.step(self.round, "cand", lambda _: LogRecord(
            round=self.round, role="cand", candidate=best.source, summary=f"{best.id} {best.status}",
            payload=HistoryRow(round=self.round, status=best.status, speedup=best.speedup, detail=best.detail,
                               id=best.id, attempts=len(attempts)).model_dump(mode="json")), f"c{self.slot}")
        if reflection:
            opt.echo(f"r{self.round:02d}-c{self.slot} lesson: {reflection[:160]}")
        return best

    def _next(self, entry: Entry, result: EvalResult | None, repairs: int, speeds: int):
        """What the next turn is: ("repair", None), ("speed", (why, result)), or None (the lineage ends)."""
        opt = self.opt
        if entry.status in FINAL or opt.stop:
            return None
        if not entry.ok:
            return ("repair", None) if repairs > 0 else None
        new_best = opt.db.best() is entry
        profile = opt.profiles.profile(entry, result, new_best, summarize=new_best)
        why = why_slow(entry, opt.db.get(self.parent), opt.config) if speeds > 0 else ""
        return ("speed", (why, result, profile, speeds)) if why else None

    def _continue(self, attempt: int, messages: list[Message], follow) -> list[Message] | None:
        """The conversation for attempt `attempt`: the last one's, what it is told, and (asked now) the answer."""
        opt = self.opt
        done = opt.log.load_transcript(self.round, "code", self.key(attempt - 1))
        if done is not None and done.messages:  # a resumed run: the conversation as it was
            messages = done.messages
        last = opt.db.get(candidate_id(self.round, self.slot, attempt - 1))
        if follow[0] == "repair":
            code = CodeResult.model_validate(opt.log.find(self.round, "code", self.key(attempt - 1)).payload)
            ev = opt.log.find(self.round, "eval", self.key(attempt - 1))
            result = EvalResult.model_validate(ev.payload) if ev is not None else None
            return [*messages, *repair_message(last.id, result, code.error)]
        why, result, profile, left = follow[1]
        return [*messages, *self._speed(last, why, result, profile, left)]

    def _speed(self, entry: Entry, why: str, result: EvalResult, profile, left: int) -> list[Message]:
        opt = self.opt
        parent = opt.db.get(self.parent) or opt.db.get(ORIGINAL)
        key = "" if parent.id == ORIGINAL else step_key(parent.id)
        ev = opt.log.find(parent.round, "eval", key)
        rows = shape_rows(result, parent, EvalResult.model_validate(ev.payload) if ev else None)
        at, changes, metrics, hotspots = "", [], [], []
        if profile is not None and profile.ncu.shapes:
            at = next(iter(profile.ncu.shapes))
            before = opt.profiles.get(parent)
            kind = profile.bottleneck.kind
            if before is not None and at in before.ncu.shapes:
                changes = metric_changes(before.ncu.shapes[at], profile.ncu.shapes[at], kind, opt.config.ncu_metrics)
            else:
                metrics = choose_metrics(profile.ncu.shapes[at], kind, opt.config.ncu_metrics)
            hotspots = profile.ncu.hotspots
        return speed_message(entry, parent, why, rows, left - 1, at, changes, metrics, hotspots)

    def _code(self, attempt: int, messages: list[Message], transcript: Transcript) -> LogRecord:
        opt = self.opt
        transcript.messages = list(messages)
        base = dict(parent=self.parent, plan_index=self.plan_index, island=self.island)
        if attempt > 0:
            opt.check_stop()
            try:
                reply = opt.models("coder").complete(messages, tag=f"r{self.round:02d} turn c{self.slot}a{attempt}")
            except RequestRejected as exc:  # the conversation outgrew the model's context: the candidate ends
                transcript.errors.append(str(exc))
                return LogRecord(round=self.round, role="code", summary=f"c{self.slot}a{attempt} rejected",
                                 payload=CodeResult(error=str(exc), status="parse", **base).model_dump(mode="json"))
            transcript.usage = reply.usage
            transcript.messages.append(Message(role="assistant", content=reply.content))
        answer = transcript.messages[-1].content
        try:
            source = parse_kernel(answer)
        except (ParseError, UnsafeCode) as exc:
            transcript.errors.append(str(exc))
            status = "unsafe" if isinstance(exc, UnsafeCode) else "parse"
            code = CodeResult(error=str(exc), status=status, **base)
            return LogRecord(round=self.round, role="code", summary=f"{candidate_id(self.round, self.slot, attempt)} "
                             f"{status}", payload=code.model_dump(mode="json"))
        shapes: list[Shape] = []
        if opt.config.single_agent:  # the answer also plans and may add test shapes
            shapes = single_shapes(opt.spec, answer, opt.suite()[0], opt.config)
            base["plan"] = strip_code(answer)[:4000]
        path = opt.log.save_candidate(self.round, source, self.slot, attempt)
        return LogRecord(round=self.round, role="code", candidate=str(path), payload=CodeResult(
            candidate=str(path), shapes=shapes, **base).model_dump(mode="json"))

    def _evaluate(self, attempt: int, code: CodeResult) -> EvalResult:
        opt = self.opt
        label = candidate_id(self.round, self.slot, attempt)

        def evaluation(_: Transcript) -> LogRecord:
            shapes, trials = opt.suite()
            result = opt.pool.submit(opt.request(code.candidate, label, shapes, trials)).result()
            return LogRecord(round=self.round, role="eval", candidate=code.candidate,
                             payload=opt.trim(result).model_dump(mode="json"))

        return EvalResult.model_validate(opt.step(self.round, "eval", evaluation, self.key(attempt)).payload)
