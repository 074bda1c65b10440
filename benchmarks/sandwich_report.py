"""The in-place (sandwich) figures of the shipped patches: a markdown summary, and the manifests' defer bounds.

Usage:
    python3 benchmarks/sandwich_report.py ROWS.jsonl [--fixtures FIXTURES.txt] [--out SUMMARY.md]
                                          [--defer --source TEXT] [--margin 0.0] [--patches DIR]
    python3 benchmarks/sandwich_report.py --plan [--max-tokens N]    (what benchmarks/gpu/evaluator.sh times)

ROWS.jsonl holds `astra-sglang bench OP --shapes served --sandwich` rows (benchmarks/gpu/evaluator.sh writes
OUT/sandwich.jsonl). For every enabled patch with rows, the served shapes (those its manifest does not already
leave to SGLang) whose in-place speedup is below 1 - MARGIN are slow; the tool picks the defer bounds
(`below_rows`, `min_bytes`: the patch layer's rule, patchset.manifest.Defer) that leave every slow shape to
SGLang and the fewest fast ones, merged with the manifest's own bounds; where no bound keeps a fast shape, the
patch is disabled. It prints the decisions; with --defer it writes them into patches/<op>/manifest.json, with
the rows as evidence (SOURCE says where they were measured: GPU, date, commit, command).
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from astra_sglang.patchset.manifest import Defer, PatchManifest
from astra_sglang.specs.registry import get_spec, resolve_shapes


@dataclass
class Decision:
    op: str
    action: str
    """keep | defer | disable | no rows"""
    slow: list[dict] = field(default_factory=list)
    fast: list[dict] = field(default_factory=list)
    given_up: list[dict] = field(default_factory=list)
    """Fast served rows the bounds leave to SGLang too."""
    below_rows: int | None = None
    min_bytes: int | None = None


def load_rows(path: Path) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in rows if r.get("type") == "shape" and r.get("sandwich")]


def _shape(row: dict) -> str:
    return "x".join(map(str, row["shape"]))


def _rows_and_bytes(spec, row: dict) -> tuple[int, int]:
    first = next((a for a in spec.tensor_args if a.dtype == "T"), spec.tensor_args[0])
    shape = tuple(row["shape"])
    return spec.arg_shape(first, shape)[0], spec.call_bytes(shape, row["dtype"])


def served(spec, manifest: PatchManifest, rows: list[dict]) -> list[dict]:
    """The rows a server would run this patch's kernel at: covered, correct, not already deferred, within the
    gate's largest size."""
    out = []
    for r in rows:
        if not r.get("covered", True) or r.get("correct") is False:
            continue
        if manifest.defer and manifest.defer.defers(spec, tuple(r["shape"]), r["dtype"]):
            continue
        if manifest.gate_max_bytes and _rows_and_bytes(spec, r)[1] > manifest.gate_max_bytes:
            continue
        out.append(r)
    return out


def in_place(row: dict) -> float | None:
    """The row's in-place speedup, None where it is not resolved: the harness gives None where the GEMMs' spread
    swallows the op (harness/sandwich.py UNRESOLVED_ROUNDS); rows recorded before that rule are recognised by a
    median share that is not positive."""
    w = row["sandwich"]
    if not w.get("speedup") or w["op_candidate_us"] <= 0 or w["op_baseline_us"] <= 0:
        return None
    return w["speedup"]


def decide(op: str, manifest: PatchManifest, rows: list[dict], margin: float = 0.0) -> Decision:
    spec = get_spec(op)
    rows = [r for r in served(spec, manifest, rows) if in_place(r)]
    if not rows:
        return Decision(op, "no rows")
    slow = [r for r in rows if in_place(r) < 1.0 - margin]
    fast = [r for r in rows if r not in slow]
    if not slow:
        return Decision(op, "keep", fast=fast)
    sizes = {id(r): _rows_and_bytes(spec, r) for r in rows}
    best = None
    for below in [None, *sorted({sizes[id(r)][0] + 1 for r in slow})]:
        for least in [None, *sorted({sizes[id(r)][1] for r in slow})]:
            if below is None and least is None:
                continue

            def deferred(r, below=below, least=least):
                n, b = sizes[id(r)]
                return (below is not None and n < below) or (least is not None and b >= least)

            if not all(deferred(r) for r in slow):
                continue
            given_up = [r for r in fast if deferred(r)]
            key = (len(given_up), (below is not None) + (least is not None), below or 0, -(least or 0))
            if best is None or key < best[0]:
                best = (key, below, least, given_up)
    _key, below, least, given_up = best
    if len(given_up) == len(fast):
        return Decision(op, "disable", slow, fast, given_up)
    return Decision(op, "defer", slow, fast, given_up, below, least)


def _speeds(rows: list[dict]) -> str:
    return ", ".join(f"{_shape(r)} {r['dtype']} {r['sandwich']['speedup']:.3f}x" for r in rows) or "none"


def apply(manifest: PatchManifest, decision: Decision, source: str) -> PatchManifest:
    """The manifest with the decision in it: the bounds merged with its own (the lower byte bound, the higher
    row bound, every dtype), or disabled; the rows named as evidence."""
    evidence = (f"in place, GEMM -> op -> GEMM ({source}): slower than SGLang's op at {_speeds(decision.slow)}; "
                f"faster at {_speeds(decision.fast)}")
    if decision.action == "disable":
        manifest.enabled = False
        manifest.provenance.notes = (manifest.provenance.notes + "; " if manifest.provenance.notes else "") + \
            f"disabled: {evidence}, and no size bound keeps a faster shape"
        return manifest
    if decision.action != "defer":
        return manifest
    old = manifest.defer
    lows = [b for b in (old.min_bytes if old else None, decision.min_bytes) if b]
    rows = [r for r in (old.below_rows if old else None, decision.below_rows) if r]
    manifest.defer = Defer(min_bytes=min(lows) if lows else None, below_rows=max(rows) if rows else None,
                           dtypes=[], multiple_of=old.multiple_of if old else 1,
                           evidence=(old.evidence + " " if old else "") + evidence + ".")
    spec = get_spec(manifest.op)
    missed = [r for r in decision.slow if not manifest.defer.defers(spec, tuple(r["shape"]), r["dtype"])]
    if missed:
        raise SystemExit(f"{manifest.op}: the merged defer bounds still serve {_speeds(missed)}")
    return manifest


def fixture_lines(text: str) -> list[tuple[str, str]]:
    """(test id, outcome) from `pytest -v` output."""
    found = re.findall(r"^(tests/\S+::\S+) (PASSED|FAILED|ERROR|SKIPPED)", text, flags=re.M)
    return [(name.split("::", 1)[1], outcome) for name, outcome in found]


def markdown(rows: list[dict], decisions: list[Decision], fixtures: str = "") -> str:
    out = ["# Evaluator run", ""]
    if fixtures:
        tests = fixture_lines(fixtures)
        passed = sum(1 for _, o in tests if o == "PASSED")
        out += [f"## GPU tests of the evaluator: {passed} of {len(tests)} passed", "", "| test | outcome |",
                "|---|---|"]
        out += [f"| `{name}` | {outcome} |" for name, outcome in tests] + [""]
    out += ["## In place (GEMM -> op -> GEMM) beside the isolated figure", "",
            "| op | shape | dtype | model: GEMM before, after | isolated speedup | in place op us (ours / SGLang's) | "
            "in place speedup | saved us a call | GEMMs us |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        w = r["sandwich"]
        iso = f"{r['speedup']:.3f}x" if r.get("speedup") else "-"
        placed = f"{in_place(r):.3f}x" if in_place(r) else "unresolved"
        out.append(f"| {r['kernel']} | {_shape(r)} | {r['dtype']} | {w['model']}: {w['before']}, {w['after']} | "
                   f"{iso} | "
                   f"{w['op_candidate_us']:.2f} / {w['op_baseline_us']:.2f} | {placed} | {w['saved_us']:.2f} | "
                   f"{w['gemms_us']['median_us']:.1f} |")
    out += ["", "## Decisions (served shapes below 1.0x in place are left to SGLang)", "",
            "| op | action | slow in place | fast shapes given up |", "|---|---|---|---|"]
    for d in decisions:
        what = d.action
        if d.action == "defer":
            what += " " + ", ".join(filter(None, [f"below {d.below_rows} rows" if d.below_rows else "",
                                                  f"from {d.min_bytes / 1e6:g} MB" if d.min_bytes else ""]))
        out.append(f"| {d.op} | {what} | {_speeds(d.slow)} | {_speeds(d.given_up)} |")
    return "\n".join(out) + "\n"


def plan(patches: Path, max_tokens: int) -> tuple[list[tuple[str, str]], list[str]]:
    """(op, its served shapes up to `max_tokens` tokens, as `bench --shapes` takes them) of every enabled patch
    whose spec names its neighbours in the model; and the enabled CUDA patches left out, each with why (a spec
    without a sandwich: its in-place figure is `profile --patched --compare`'s)."""
    out, left = [], []
    for folder in sorted(p for p in patches.iterdir() if (p / "manifest.json").is_file()):
        manifest = PatchManifest.load(folder)
        if not manifest.enabled or manifest.kind != "cuda":
            continue
        spec = get_spec(manifest.op)
        shapes = [s for s in resolve_shapes(spec, "served") if s[0] <= max_tokens]
        if shapes:
            out.append((manifest.op, ",".join("x".join(map(str, s)) for s in shapes)))
        else:
            why = ("its spec names no sandwich" if spec.sandwich is None
                   else f"no served shape up to {max_tokens} tokens")
            left.append(f"{manifest.op}: not timed between its neighbours ({why}); its in-place figure comes from "
                        "`astra-sglang profile --patched --compare`")
    return out, left


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rows", type=Path, nargs="?")
    parser.add_argument("--plan", action="store_true", help="print 'OP SHAPES' per enabled patch and stop")
    parser.add_argument("--max-tokens", type=int, default=1 << 30, help="--plan: served shapes up to this many tokens")
    parser.add_argument("--fixtures", type=Path, help="pytest -v output of the evaluator's GPU tests")
    parser.add_argument("--out", type=Path, help="write the markdown summary here")
    parser.add_argument("--defer", action="store_true", help="write the decisions into the manifests")
    parser.add_argument("--source", default="", help="where the rows were measured: GPU, date, commit, command")
    parser.add_argument("--margin", type=float, default=0.0, help="slow: in-place speedup below 1 - MARGIN")
    parser.add_argument("--patches", type=Path, default=Path("patches"))
    args = parser.parse_args(argv)
    if args.plan:
        timed, left = plan(args.patches, args.max_tokens)
        for op, shapes in timed:
            print(op, shapes)
        for line in left:
            print(line, file=sys.stderr)
        return 0
    if args.rows is None:
        parser.error("ROWS.jsonl is needed (or --plan)")
    rows = load_rows(args.rows)
    decisions = []
    for op in sorted({r["kernel"] for r in rows}):
        folder = args.patches / op
        if not (folder / "manifest.json").is_file():
            continue
        manifest = PatchManifest.load(folder)
        if not manifest.enabled:
            continue
        decision = decide(op, manifest, [r for r in rows if r["kernel"] == op], args.margin)
        decisions.append(decision)
        if args.defer and decision.action in ("defer", "disable"):
            if not args.source:
                parser.error("--defer needs --source (where the rows were measured)")
            apply(manifest, decision, args.source).save(folder)
            print(f"{op}: {decision.action} written to {folder / 'manifest.json'}")
    text = markdown(rows, decisions, args.fixtures.read_text() if args.fixtures and args.fixtures.is_file() else "")
    if args.out:
        args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
