"""What the planner remembers of its own run: every plan kept whole with the whole story of each candidate
written for it (the draft, every repair with what failed, every speed turn with what it measured, the
reflector's reading), plans still in flight marked as such, and repeats of earlier plans detected.

When the story outgrows `memory_chars`, the oldest finished plans are folded into a digest the summarizer
writes (memory_digest.j2), itself memoized in the run log (one digest per prefix of plans it covers, each
built on the previous one), so a resumed run reads the same memory without asking again.
"""
from __future__ import annotations

import re
import threading
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field

from astra_sglang.optimize.agents.database import Database, Entry
from astra_sglang.optimize.agents.journal import RunLog
from astra_sglang.optimize.agents.parse import ParseError, strip_code
from astra_sglang.optimize.agents.prompts import StepFailed, converse, render
from astra_sglang.optimize.records import HistoryRow, LogRecord, PlanItem, PlanSet, Transcript

if TYPE_CHECKING:
    from astra_sglang.optimize.agents.steps import Steps

SAME_PARENT = 0.6
ON_ITS_CHILD = 0.85
"""Word-bigram Jaccard similarity above which a plan repeats an earlier one: on the same parent, or on a kernel
the earlier plan produced (the change is already in it)."""


class Turn(BaseModel):
    """One attempt of a candidate lineage."""

    id: str
    kind: Literal["draft", "repair", "speed"]
    status: str
    speedup: float | None = None
    detail: str = ""


def turns_of(attempts: list[Entry]) -> list[Turn]:
    """A lineage's attempts, in order, as turns: a turn after a correct attempt is a speed turn, after a failed
    one a repair."""
    return [Turn(id=e.id, kind="draft" if i == 0 else "speed" if attempts[i - 1].ok else "repair", status=e.status,
                 speedup=e.speedup, detail=e.detail[:300]) for i, e in enumerate(attempts)]


class Outcome(BaseModel):
    """One candidate lineage written for a plan: its best kernel (else its last attempt) and every turn."""

    slot: str
    best: Entry
    turns: list[Turn] = Field(default_factory=list)
    reflection: str = ""


class PastPlan(BaseModel):
    round: int
    index: int
    island: int = 0
    parent: str
    text: str
    key: str = ""
    outcomes: list[Outcome] = Field(default_factory=list)
    in_flight: bool = False
    """Its candidates are still being written or measured."""

    def size(self) -> int:
        """About how many characters it takes in a prompt."""
        return len(self.text) + sum(160 * len(o.turns) + len(o.reflection) for o in self.outcomes) + 80


def lineages(log: RunLog, round: int, entries: list[Entry]) -> list[Outcome]:
    """The finished lineages among the entries of a round's plan, slot order, each with the best attempt its
    lineage recorded (lineage.py: its best correct attempt, else its last)."""
    slots: dict[str, list[Entry]] = {}
    for entry in entries:
        slots.setdefault(entry.id.rsplit("-a", 1)[0], []).append(entry)
    out = []
    for slot, attempts in sorted(slots.items()):
        key = slot.split("-", 1)[1]  # r03-c1 -> c1, the lineage's log key
        done = log.find(round, "cand", key)
        if done is None:
            continue  # still running
        attempts.sort(key=lambda e: e.attempts)
        best = {e.id: e for e in attempts}[HistoryRow.model_validate(done.payload).id]
        reflection = log.find(round, "reflect", key)
        out.append(Outcome(slot=slot, best=best, turns=turns_of(attempts),
                           reflection=reflection.payload.get("text", "") if reflection else ""))
    return out


def past_plans(log: RunLog, db: Database) -> list[PastPlan]:
    """Every plan of the run so far, (round, index) order; a plan whose round has not closed is in flight."""
    by_plan: dict[tuple[int, int | None], list[Entry]] = {}
    for entry in db.entries.values():
        if entry.id != "r00":
            by_plan.setdefault((entry.round, entry.plan), []).append(entry)
    out = []
    for rec in sorted(log.of_role("plan"), key=lambda r: r.round):
        if rec.round <= 0:
            continue
        plans = PlanSet.model_validate(rec.payload)
        closed = log.find(rec.round, "round") is not None
        for i, item in enumerate(plans.plans):
            outcomes = lineages(log, rec.round, by_plan.get((rec.round, i), []))
            out.append(PastPlan(round=rec.round, index=i, island=plans.island, parent=item.parent, text=item.text,
                                key=item.key, outcomes=outcomes, in_flight=not closed))
    return out


def _bigrams(text: str) -> set[tuple[str, str]]:
    words = re.findall(r"[a-z_]+|\d+(?:\.\d+)?", text.lower())
    return set(zip(words, words[1:])) or {(w, "") for w in words}


def similarity(a: str, b: str) -> float:
    x, y = _bigrams(a), _bigrams(b)
    return len(x & y) / len(x | y) if x and y else 0.0


def find_repeat(item: PlanItem, earlier: list[PastPlan]) -> PastPlan | None:
    """The earlier plan `item` repeats: on the same parent, the same key or similar words; on a kernel that plan
    produced, nearly the same words. The same idea on an unrelated kernel is not a repeat."""
    key = re.sub(r"\W+", "-", item.key.lower()).strip("-")
    for plan in earlier:
        if plan.parent == item.parent:
            if key and key == re.sub(r"\W+", "-", plan.key.lower()).strip("-"):
                return plan
            if similarity(item.text, plan.text) >= SAME_PARENT:
                return plan
        elif any(item.parent.startswith(o.slot) for o in plan.outcomes) and \
                similarity(item.text, plan.text) >= ON_ITS_CHILD:
            return plan
    return None


class Memory:
    """The planner's view of the past: a digest of the oldest plans (when the story is long) and the rest whole.
    A digest folds enough plans that the rest fits in half the budget, so few are ever written; planners that
    need one while it is being written wait for it, and different digests are written at once."""

    def __init__(self, opt: "Steps"):
        self.opt = opt
        self._lock = threading.Lock()
        self._writing: dict[int, threading.Lock] = {}

    def view(self, plans: list[PastPlan]) -> tuple[str, list[PastPlan]]:
        """(digest, the plans shown whole) of the run's past plans (past_plans)."""
        budget = self.opt.config.memory_chars
        sizes = [p.size() for p in plans]
        if sum(sizes) <= budget:
            return "", plans
        done = sorted((int(r.key[1:]) for r in self.opt.log.of_role("digest")), reverse=True)
        for upto in done:  # an existing digest after which the rest fits: no new one
            if upto <= len(plans) and sum(sizes[upto:]) <= budget:
                return self.opt.log.find(0, "digest", f"d{upto}").payload["text"], plans[upto:]
        folded, rest = 0, sum(sizes)
        while folded < len(plans) and not plans[folded].in_flight and rest > budget // 2:
            rest -= sizes[folded]
            folded += 1
        if folded == 0:
            return "", plans
        try:
            return self._digest(folded, plans), plans[folded:]
        except StepFailed:  # no digest: the newest plans whole, at least one
            return "", plans[min(folded, len(plans) - 1):]

    def _digest(self, upto: int, plans: list[PastPlan]) -> str:
        """The digest of plans[:upto], built on the longest earlier digest (memoized in the run log)."""
        log = self.opt.log
        with self._lock:
            writing = self._writing.setdefault(upto, threading.Lock())
        with writing:  # one writer per digest; a planner needing the same one waits for it
            done = log.find(0, "digest", f"d{upto}")
            if done is not None:
                return done.payload["text"]
            earlier = max((int(r.key[1:]) for r in log.of_role("digest") if int(r.key[1:]) < upto), default=0)
            previous = log.find(0, "digest", f"d{earlier}").payload["text"] if earlier else ""
            model = self.opt.models("summarizer")
            messages = render("memory_digest.j2", spec=self.opt.spec, previous=previous, plans=plans[earlier:upto])

            def parse(text: str) -> str:
                text = strip_code(text)
                if len(text) < 20:
                    raise ParseError("the digest is empty: answer with a few plain-text lines")
                return text[:4000]

            def run(t: Transcript) -> LogRecord:
                text = converse(model, messages, parse, self.opt.config.parse_retries, t, tag=f"digest d{upto}")
                return LogRecord(round=0, role="digest", summary=f"plans 1-{upto} folded", payload={"text": text})

            return self.opt.step(0, "digest", run, f"d{upto}").payload["text"]
