"""Many ops as one `optimize` job: every op's run at once, all sharing one pool, so the GPUs stay busy
while one op waits for its model and another builds. Each op gets RUN_DIR/<op>/ (its own run directory,
resumable on its own); the job writes RUN_DIR/job.jsonl (one row per op) and RUN_DIR/job.md. An op that
fails (its start kernel cannot be evaluated, say) is a row of the table, not the end of the job.
"""
from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

from pydantic import BaseModel
from rich.console import Console
from rich.table import Table

from astra_sglang.errors import AstraError
from astra_sglang.optimize.agents.journal import write_atomic
from astra_sglang.optimize.records import RunOutcome


class OpResult(BaseModel):
    op: str
    run_dir: str
    status: str
    """winner | no winner | failed."""
    speedup: float | None = None
    candidate: str = ""
    method: str = ""
    seconds: float = 0.0
    detail: str = ""


def _row(op: str, run_dir: Path, began: float, outcome: RunOutcome | None, error: str) -> OpResult:
    seconds = time.time() - began
    if outcome is None or outcome.baseline_error:
        return OpResult(op=op, run_dir=str(run_dir), status="failed", seconds=seconds,
                        detail=(error or (outcome.baseline_error if outcome else ""))[:300])
    w = outcome.winner
    return OpResult(op=op, run_dir=str(run_dir), status="winner" if w else "no winner", seconds=seconds,
                    speedup=w.speedup if w else None, candidate=w.candidate if w else "",
                    method=w.method if w else "", detail=outcome.stop_reason[:300])


def run_job(ops: list[str], out: Path, one: Callable[[str, Path, Callable[[str], None]], RunOutcome | None],
            echo: Callable[[str], None], parallel: int | None = None) -> list[OpResult]:
    """`one(op, run_dir, echo)` for every op, `parallel` at a time (default: all at once)."""
    out.mkdir(parents=True, exist_ok=True)

    def go(op: str) -> OpResult:
        began, outcome, error = time.time(), None, ""
        try:
            outcome = one(op, out / op, lambda line: echo(f"[{op}] {line}"))
        except AstraError as exc:
            error = str(exc)
            echo(f"[{op}] error: {error}")
        return _row(op, out / op, began, outcome, error)

    with ThreadPoolExecutor(max_workers=parallel or len(ops)) as pool:
        results = list(pool.map(go, ops))
    write_atomic(out / "job.jsonl", "".join(json.dumps(r.model_dump()) + "\n" for r in results))
    lines = ["# astra-sglang optimize job", "", "| op | result | speedup | winner | seconds | detail |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r.op} | {r.status} | {f'{r.speedup:.3f}x' if r.speedup else '-'} | "
              f"{r.candidate or '-'}{f' ({r.method})' if r.method else ''} | {r.seconds:.0f} | "
              f"{r.detail.replace('|', '/')} |" for r in results]
    write_atomic(out / "job.md", "\n".join(lines) + "\n")
    return results


def print_table(results: list[OpResult]) -> None:
    table = Table(title="optimize job")
    for col in ("op", "result", "speedup", "winner", "seconds", "detail"):
        table.add_column(col)
    for r in results:
        table.add_row(r.op, r.status, f"{r.speedup:.3f}x" if r.speedup else "-",
                      f"{r.candidate or '-'}{f' ({r.method})' if r.method else ''}", f"{r.seconds:.0f}", r.detail[:80])
    Console(width=max(Console().width, 140)).print(table)
