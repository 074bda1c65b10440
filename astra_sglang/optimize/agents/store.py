"""The lesson store across ops and runs: what worked (or did not) on which kind of op and GPU, with the gain
measured, kept in the user folder (HOME/memory.jsonl) for every later planner to read.

A lesson is written when a candidate lineage that produced a correct kernel ends: its plan, the kernel it
started from, the speedup over that parent it measured and the reflector's reading of why. Planners read the
lessons of the same op on the same GPU architecture first, then of the same kind of op (a norm, an
elementwise gated activation, an attention merge...), best gains first, and the clearest losses too, so an
idea that hurt on a similar op is not tried blind. One JSON line per lesson, appended in one write, so
several runs (the ops of one job, or separate processes) share the file safely.
"""
from __future__ import annotations

import datetime as dt
import os
import re
import threading
from pathlib import Path

from pydantic import BaseModel, ValidationError

from astra_sglang.paths import home_dir
from astra_sglang.specs.records import KernelSpec

STORE = "memory.jsonl"
KINDS = (("attention", ("attn", "attention", "merge_state", "lse")), ("norm", ("norm",)),
         ("rotary", ("rope", "rotary")), ("quantization", ("quant", "fp8", "int8")),
         ("moe routing", ("moe", "topk", "top-k", "expert")), ("softmax", ("softmax",)),
         ("gated activation", ("silu", "gelu", "_and_mul", "activation")))
"""Kinds of op by the words of their name and summary, first match wins."""


def op_kind(spec: KernelSpec) -> str:
    text = f"{spec.name} {spec.summary}".lower()
    return next((kind for kind, words in KINDS if any(w in text for w in words)), "other")


class Lesson(BaseModel):
    op: str
    kind: str
    gpu: str
    arch: str
    plan: str
    """The plan, as the planner wrote it (cut at 600 characters)."""
    parent_speedup: float
    speedup: float
    """The lineage's best kernel, geomean over the baseline."""
    gain: float
    """speedup / parent_speedup: what the change bought over the kernel it started from."""
    reflection: str = ""
    candidate: str = ""
    run: str = ""
    model: str = ""
    date: str = ""


class LessonStore:
    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path else home_dir() / STORE
        self._lock = threading.Lock()

    def read(self) -> list[Lesson]:
        if not self.path.is_file():
            return []
        out = []
        for line in self.path.read_text(errors="replace").splitlines():
            try:
                out.append(Lesson.model_validate_json(line))
            except (ValidationError, ValueError):
                continue  # a line torn by a kill, or written by another version
        return out

    def add(self, lesson: Lesson) -> Lesson:
        """Append (once per run and candidate: a resumed run does not write its lessons twice)."""
        lesson = lesson.model_copy(update={"date": lesson.date or dt.date.today().isoformat()})
        with self._lock:
            if any(x.run == lesson.run and x.candidate == lesson.candidate for x in self.read() if lesson.run):
                return lesson
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, (lesson.model_dump_json() + "\n").encode())
            finally:
                os.close(fd)
        return lesson

    def relevant(self, op: str, kind: str, arch: str, limit: int = 8, exclude_run: str = "") -> list[Lesson]:
        """The lessons a planner of `op` on `arch` reads: same op and GPU, then same kind and GPU, then same op
        elsewhere; within each, the largest gains first and, last, the clearest losses (at most a quarter)."""
        lessons = [x for x in self.read() if not exclude_run or x.run != exclude_run]
        tiers = [[x for x in lessons if x.op == op and x.arch == arch],
                 [x for x in lessons if x.op != op and x.kind == kind and x.arch == arch],
                 [x for x in lessons if x.op == op and x.arch != arch]]
        chosen: list[Lesson] = []
        seen: set[str] = set()
        losses = max(1, limit // 4)
        for tier in tiers:
            wins = sorted((x for x in tier if x.gain > 1.0), key=lambda x: -x.gain)
            lost = sorted((x for x in tier if x.gain <= 1.0), key=lambda x: x.gain)[:losses]
            for x in [*wins, *lost]:
                key = re.sub(r"\W+", " ", x.plan.lower()).strip()[:200]
                if len(chosen) < limit and key not in seen:
                    chosen.append(x)
                    seen.add(key)
        return chosen
