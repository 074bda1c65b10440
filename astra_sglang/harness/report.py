"""Human and machine output of an evaluation: a rich table and JSONL rows."""
from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

from astra_sglang.harness.records import EvalResult


def _f(value: float | None, fmt: str = "{:.2f}") -> str:
    return "-" if value is None else fmt.format(value)


def table(result: EvalResult) -> Table:
    title = (f"{result.kernel}: {result.candidate} vs {result.baseline} on {result.gpu or 'no GPU'} | "
             f"SM-copy roofline {_f(result.roofline_gbps, '{:.0f}')} GB/s | empty kernel in a graph "
             f"{_f(result.empty_kernel_us)} us")
    t = Table(title=title, title_justify="left")
    columns = ["shape", "dtype", "check", "cand us (p10-p90)", "base us", "speedup", "GB/s", "% roof", "floor us",
               "eager cand/base us"]
    placed = any(s.sandwich for s in result.shapes)
    if placed:  # the op between its model neighbours (harness/sandwich.py)
        columns += ["in place: op us cand/base", "in place speedup"]
    for col in columns:
        t.add_column(col, justify="left" if col in ("shape", "dtype", "check") else "right")
    for s in result.shapes:
        check = {True: "pass", False: "FAIL", None: "-"}[s.correct] if s.covered else "not covered"
        if s.baseline_defect:
            check += " (baseline defect)"
        cand = "-" if s.candidate is None else (
            f"{s.candidate.median_us:.2f} ({s.candidate.p10_us:.2f}-{s.candidate.p90_us:.2f})")
        base = "-" if s.baseline is None else f"{s.baseline.median_us:.2f}"
        eager = "-" if s.eager_candidate_us is None else f"{s.eager_candidate_us:.1f}/{_f(s.eager_baseline_us, '{:.1f}')}"
        cells = ["x".join(map(str, s.shape)), s.dtype, check, cand, base, _f(s.speedup, "{:.3f}x"),
                 _f(s.gbps, "{:.0f}"), _f(s.pct_roofline, "{:.0f}%"), _f(s.floor_us), eager]
        if placed:
            w = s.sandwich
            cells += ["-", "-"] if w is None else [f"{w.op_candidate_us:.2f}/{w.op_baseline_us:.2f}",
                                                   _f(w.speedup, "{:.3f}x")]
        t.add_row(*cells)
    return t


def print_result(result: EvalResult, console: Console | None = None) -> None:
    console = console or Console(width=max(Console().width, 160))
    console.print(table(result))
    for s in result.shapes:
        if s.reason:
            console.print(f"  {'x'.join(map(str, s.shape))} {s.dtype}: {s.reason}")
        if s.baseline_defect:
            console.print(f"  {'x'.join(map(str, s.shape))} {s.dtype}: baseline defect: {s.baseline_defect}")
    for s in result.shapes:
        if s.sandwich:
            w = s.sandwich
            console.print(f"  {'x'.join(map(str, s.shape))} {s.dtype} in place ({w.model}): {w.before} -> op -> "
                          f"{w.after}, x{w.repeats} a replay; GEMMs alone {w.gemms_us.median_us:.2f} us, saved "
                          f"{w.saved_us:.2f} us a call")
    geo = result.geomean_speedup
    declined = sum(1 for s in result.shapes if not s.covered)
    status = "ok" if result.ok else f"FAILED ({result.stage}): {result.reason}"
    placed = " (in place where timed in place)" if any(s.sandwich for s in result.shapes) else ""
    console.print(f"geomean speedup {_f(geo, '{:.3f}x')}{placed}"
                  f"{f' ({declined} declined shapes at 1.0x)' if declined else ''} | build {_f(result.build and result.build.seconds, '{:.1f}')}s"
                  f"{' (cached)' if result.build and result.build.cached else ''} | L2 {result.l2} | wall {result.wall_s:.1f}s"
                  f" | {status}")


def write_jsonl(result: EvalResult, path: str | Path) -> None:
    """One line per shape (flat, for pandas/jq) plus a summary line; appends."""
    meta = {"kernel": result.kernel, "candidate_label": result.candidate, "baseline_label": result.baseline,
            "gpu": result.gpu,
            "roofline_gbps": result.roofline_gbps, "empty_kernel_us": result.empty_kernel_us, "l2": result.l2}
    with Path(path).open("a") as f:
        for s in result.shapes:
            f.write(json.dumps({"type": "shape", **meta, **s.model_dump(mode="json")}) + "\n")
        summary = result.model_dump(mode="json", exclude={"shapes"})
        f.write(json.dumps({"type": "summary", **summary, "geomean_speedup": result.geomean_speedup}) + "\n")
