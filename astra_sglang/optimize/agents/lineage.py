"""One candidate of a round, from its first draft through up to `repairs` repairs, in its own conversation.

Attempt 0 is the coder's draft (one of the n samples of its plan's prompt). Each attempt is parsed and
safety-checked, then built, checked and timed through the pool; a failure goes back to the same
conversation with what went wrong (the parse or safety error, the build log, the mismatching shapes, the
crash) and the answer is attempt k+1. Every step is a memoized record of the run log, so a resumed run
re-asks nothing that was answered and re-evaluates nothing that was evaluated.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from astra_sglang.harness.records import EvalResult
from astra_sglang.harness.safety import UnsafeCode
from astra_sglang.optimize.agents.database import Entry
from astra_sglang.optimize.agents.journal import candidate_id
from astra_sglang.optimize.agents.llm import RequestRejected
from astra_sglang.optimize.agents.parse import ParseError, strip_code
from astra_sglang.optimize.agents.roles import parse_kernel, repair_message, single_shapes
from astra_sglang.optimize.records import CodeResult, HistoryRow, LogRecord, Message, Shape, Transcript

if TYPE_CHECKING:
    from astra_sglang.optimize.agents.steps import Steps as Optimizer

DONE = ("ok", "compiled", "failed")
"""Statuses a repair cannot change: a winner candidate, a build with nothing to run on, a baseline problem."""


class Lineage:
    def __init__(self, opt: "Optimizer", round: int, slot: int, prompt: list[Message], draft: str, parent: str,
                 plan_index: int | None):
        self.opt, self.round, self.slot = opt, round, slot
        self.prompt, self.draft, self.parent, self.plan_index = prompt, draft, parent, plan_index

    def key(self, attempt: int) -> str:
        return f"c{self.slot}a{attempt}"

    def run(self) -> Entry | None:
        """The candidate's last attempt as a database entry; None when the run stopped before it finished."""
        opt, entry = self.opt, None
        messages = [*self.prompt, Message(role="assistant", content=self.draft)]
        for attempt in range(opt.config.repairs + 1):
            if attempt > 0:
                messages = self._continue(attempt, messages, entry)
                if messages is None:
                    return None
            code = CodeResult.model_validate(
                opt.step(self.round, "code", lambda t: self._code(attempt, messages, t), self.key(attempt)).payload)
            result = self._evaluate(attempt, code) if code.candidate else None
            entry = opt.enter(self.round, self.slot, attempt, code, result)
            if entry.status in DONE:
                break
        opt.step(self.round, "cand", lambda _: LogRecord(
            round=self.round, role="cand", candidate=entry.source, summary=f"{entry.id} {entry.status}",
            payload=HistoryRow(round=self.round, status=entry.status, speedup=entry.speedup, detail=entry.detail,
                               id=entry.id, attempts=entry.attempts).model_dump(mode="json")), f"c{self.slot}")
        return entry

    def _continue(self, attempt: int, messages: list[Message], last: Entry) -> list[Message] | None:
        """The conversation for attempt `attempt`: the last one's, its failure, and (asked now) the answer."""
        opt = self.opt
        done = opt.log.load_transcript(self.round, "code", self.key(attempt - 1))
        if done is not None and done.messages:  # a resumed run: the conversation as it was
            messages = done.messages
        code = CodeResult.model_validate(opt.log.find(self.round, "code", self.key(attempt - 1)).payload)
        ev = opt.log.find(self.round, "eval", self.key(attempt - 1))
        result = EvalResult.model_validate(ev.payload) if ev is not None else None
        return [*messages, *repair_message(last.id, result, code.error)]

    def _code(self, attempt: int, messages: list[Message], transcript: Transcript) -> LogRecord:
        opt = self.opt
        transcript.messages = list(messages)
        base = dict(parent=self.parent, plan_index=self.plan_index)
        if attempt > 0:
            opt.check_stop()
            try:
                reply = opt.model.complete(messages, tag=f"r{self.round:02d} repair c{self.slot}a{attempt}")
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

