"""The end of a run: the database's diverse best kernels, each finalist that exposes knobs tuned per shape
by the tuner (LLM + tuner), a per-shape dispatch among the finalists and the original, all of them
evaluated again on the suite plus the acceptance gate (every shape the patch will serve), in parallel
through the pool; the best eligible one that compute-sanitizer finds nothing in wins (optimize.winner).

The dispatch's table is built from the suite's shapes only, so the held-out shapes still test it
honestly (they take their nearest measured shape's choice).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from astra_sglang.errors import AstraError
from astra_sglang.harness.records import EvalResult
from astra_sglang.kernels.knobs import parse_knobs
from astra_sglang.optimize.agents.database import Entry, shape_key
from astra_sglang.optimize.agents.journal import write_atomic
from astra_sglang.optimize.records import LogRecord, Transcript, Winner
from astra_sglang.optimize.tuner.cuda_tune import Tuning, tune
from astra_sglang.optimize.tuner.ensemble import ORIGINAL, Member, choose, ensemble_source
from astra_sglang.optimize.winner import FINAL_ROUND, passed, screen, select_winner
from astra_sglang.specs.registry import resolve_shapes

if TYPE_CHECKING:
    from astra_sglang.optimize.agents.steps import Steps as Optimizer

TUNE_ROUNDS = 2


@dataclass(frozen=True)
class Finalist:
    label: str
    """The candidate's id, or <id>-tuned, or dispatch."""
    path: str
    round: int
    method: str


def _tuned(opt: "Optimizer", entry: Entry) -> Finalist | None:
    """The entry's knobs tuned per suite shape (memoized); None when it has none or none worked."""
    text = Path(entry.source).read_text()
    if not opt.config.tune_configs or not parse_knobs(text) or "astra_launch_cfg" not in text:
        return None

    def run(_: Transcript) -> LogRecord:
        shapes, _ = opt.suite()
        dtype = "bfloat16" if "bfloat16" in opt.dtypes else opt.dtypes[0]
        tuning = Tuning(opt.spec, text, opt.log.dir / "tuning" / entry.id, echo=opt.echo, batch=opt.pool.map,
                        shapes=shapes, dtype=dtype, arch=opt.config.arch)
        try:
            path, _ = tune(tuning, TUNE_ROUNDS, opt.config.tune_configs)
        except AstraError as exc:
            return LogRecord(round=FINAL_ROUND, role="tune", summary=f"{entry.id}: {exc}"[:300])
        return LogRecord(round=FINAL_ROUND, role="tune", candidate=str(path), summary=f"{entry.id} tuned")

    rec = opt.step(FINAL_ROUND, "tune", run, entry.id)
    return Finalist(f"{entry.id}-tuned", rec.candidate, entry.round, "llm+tuner") if rec.candidate else None


def _evaluate(opt: "Optimizer", finalists: list[Finalist], shapes, trials) -> dict[str, EvalResult]:
    """Every finalist's final evaluation, submitted at once (memoized per finalist)."""
    # The acceptance gate ships on the in-place figure at the shapes a server runs (harness/sandwich.py).
    pending = {f.label: opt.pool.submit(opt.request(f.path, f.label, shapes, trials, sandwich="served"))
               for f in finalists
               if opt.log.find(FINAL_ROUND, "final", f.label) is None}
    out = {}
    for f in finalists:
        rec = opt.step(FINAL_ROUND, "final", lambda _: LogRecord(
            round=FINAL_ROUND, role="final", candidate=f.path,
            payload=opt.trim(pending[f.label].result()).model_dump(mode="json")), f.label)
        out[f.label] = EvalResult.model_validate(rec.payload)
    return out


def _dispatch(opt: "Optimizer", finalists: list[Finalist], finals: dict[str, EvalResult], suite) -> Finalist | None:
    members = [f for f in finalists if passed(finals[f.label])]
    if not opt.config.dispatch or not members:
        return None
    keys = {(tuple(s), d) for s in suite for d in opt.dtypes}
    speedups = [{(tuple(s.shape), s.dtype): (s.speedup if s.covered else 1.0) for s in finals[m.label].shapes
                 if (tuple(s.shape), s.dtype) in keys and (s.speedup or not s.covered)} for m in members]
    table = choose(speedups)
    if len(set(table.values())) == 1:
        return None  # one kernel (or the original) everywhere: a dispatch adds nothing
    source = ensemble_source(opt.spec, [Member(m.label, Path(m.path).read_text()) for m in members], table,
                             f"{opt.spec.name}, chosen at {len(table)} suite shapes")
    path = write_atomic(opt.log.dir / "candidates" / "final-dispatch.cu", source)
    used = {members[i].method for i in set(table.values()) if i != ORIGINAL}
    opt.echo("dispatch: " + ", ".join(f"{shape_key(*k)} -> {members[v].label if v != ORIGINAL else 'original'}"
                                      for k, v in sorted(table.items())))
    return Finalist("dispatch", str(path), max(m.round for m in members), "llm+tuner" if "llm+tuner" in used else "llm")


def finish(opt: "Optimizer") -> Winner | None:
    if opt.config.compile_only:
        return None
    elites = opt.db.elites(opt.config.finalists, include_original=False)
    finalists = [Finalist(e.id, e.source, e.round, "llm") for e in elites]
    finalists += [t for e in elites if (t := _tuned(opt, e)) is not None]
    if not finalists:
        return None
    suite, trials = opt.suite()
    shapes = suite + [s for s in resolve_shapes(opt.spec, opt.config.final_shapes) if s not in suite]
    finals = _evaluate(opt, finalists, shapes, trials)
    extra = _dispatch(opt, finalists, finals, suite)
    if extra is not None:
        finalists.append(extra)
        finals.update(_evaluate(opt, [extra], shapes, trials))
    by_index = {i: finals[f.label] for i, f in enumerate(finalists)}
    while by_index:  # the best eligible finalist that compute-sanitizer finds nothing in
        winner = select_winner(opt.spec.name, by_index, {i: f.path for i, f in enumerate(finalists)}, opt.config,
                               opt.model.name if opt.model else "", opt.log.dir.name)
        if winner is None:
            return None
        screened = screen(winner, opt.spec, opt.echo)
        if screened is not None:
            chosen = finalists[winner.round]
            return screened.model_copy(update={"round": chosen.round, "candidate": chosen.label,
                                               "method": chosen.method})
        by_index.pop(winner.round)
    return None
