"""After a candidate lineage ends: the reflector's reading of what it taught (a memoized step of the run log,
which the planner reads beside the lineage's turns), and, for a lineage that produced a correct kernel, a
lesson in the store across ops and runs with the gain it measured over its parent (with the reflector's reading
where there is one; a run without reflection still leaves its lessons).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from astra_sglang.optimize.agents.database import Entry
from astra_sglang.optimize.agents.memory import turns_of
from astra_sglang.optimize.agents.parse import ParseError, strip_code
from astra_sglang.optimize.agents.prompts import StepFailed, converse, render
from astra_sglang.optimize.agents.store import Lesson, op_kind
from astra_sglang.optimize.records import LogRecord, Transcript

if TYPE_CHECKING:
    from astra_sglang.optimize.agents.steps import Steps


def reflect(opt: "Steps", round: int, slot: int, plan: str, parent: Entry | None, attempts: list[Entry],
            best: Entry) -> str:
    """The lineage's lesson (asked once, memoized); '' where reflection is off or the model gave none."""
    key = f"c{slot}"
    if not opt.config.reflect or opt.models is None or parent is None:
        return ""
    model = opt.models("reflector")
    messages = render("reflect.j2", spec=opt.spec, gpu=opt.gpu, plan=plan, parent=parent, turns=turns_of(attempts),
                      best=best if best.ok else None)

    def parse(text: str) -> str:
        text = " ".join(strip_code(text).split())
        if len(text) < 10:
            raise ParseError("the reflection is empty: answer with up to 3 plain-text lines")
        return text[:600]

    def run(t: Transcript) -> LogRecord:
        opt.check_stop()
        text = converse(model, messages, parse, opt.config.parse_retries, t, tag=f"r{round:02d} reflect c{slot}")
        return LogRecord(round=round, role="reflect", summary=text[:300], payload={"text": text})

    try:
        return opt.step(round, "reflect", run, key).payload.get("text", "")
    except StepFailed:
        return ""


def remember(opt: "Steps", plan: str, parent: Entry | None, best: Entry, reflection: str) -> None:
    """The lineage's lesson in the store across ops and runs, where it produced a correct kernel (written once per
    run and candidate: a resumed run adds nothing twice)."""
    if not opt.config.memory or not best.ok or parent is None or not parent.speedup or not plan.strip():
        return  # single-agent answers have no plan of their own to learn from
    opt.store.add(Lesson(op=opt.spec.name, kind=op_kind(opt.spec), gpu=opt.gpu.name, arch=opt.gpu.arch, plan=plan[:600],
                         parent_speedup=parent.speedup, speedup=best.speedup or 0.0,
                         gain=(best.speedup or 0.0) / parent.speedup, reflection=reflection, candidate=best.id,
                         run=str(opt.log.dir.resolve()), model=opt.models("coder").name if opt.models else ""))
