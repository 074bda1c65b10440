"""After benchmarks/gpu/knobs.sh: the per-shape speedups of each tuned extracted kernel over SGLang's op.

Usage: python3 benchmarks/knobs_table.py OUT DATE GPU COMMIT COMMAND OP...
Reads OUT/OP/final.json (the tuner's final evaluation: the tuned extracted kernel against SGLang's op, every
gate shape and dtype) and OUT/OP/extracted/knobbed.cu (the knobs derived from the extracted original), and
writes OUT/knobs.md: per op the derived knobs, the geomean, and one row per shape of the tuned dtype.
An op whose run did not finish (no final.json) gets a line saying so, not a row.
"""
from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

KNOB = re.compile(r"^// astra:knob (\w+) (.+)$", re.M)
ORIGINAL = re.compile(r"^// (\w+) \((\w+), original (\d+)\)", re.M)
DTYPE = "bfloat16"


def knob_line(knobbed: Path) -> str:
    if not knobbed.is_file():
        return "no knobbed.cu (no knob derived, or the extraction failed: see run.log)"
    text = knobbed.read_text()
    original = {name: value for name, _, value in ORIGINAL.findall(text)}
    return "; ".join(f"{name} {values.replace(' ', '/')} (original {original.get(name, '?')})"
                     for name, values in KNOB.findall(text))


def op_section(out: Path, op: str) -> list[str]:
    lines = [f"## {op}", "", f"derived knobs: {knob_line(out / op / 'extracted' / 'knobbed.cu')}", ""]
    final_path = out / op / "final.json"
    if not final_path.is_file():
        return lines + ["no final evaluation (the run stopped before it: see run.log)", ""]
    final = json.loads(final_path.read_text())
    rows = [r for r in final.get("shapes", []) if r.get("dtype") == DTYPE]
    timed = [r for r in rows if r.get("speedup")]
    geomean = math.exp(sum(math.log(r["speedup"]) for r in timed) / len(timed)) if timed else None
    status = "passed" if final.get("ok") else f"FAILED: {final.get('reason', '')[:160]}"
    lines += [f"final evaluation {status}; baseline {final.get('baseline') or '?'}; "
              f"{DTYPE} geomean {f'{geomean:.3f}x' if geomean else 'n/a'} over {len(timed)} shapes", "",
              "| shape | SGLang us | tuned extracted us | speedup | correct |", "|---|---|---|---|---|"]
    for r in rows:
        base, cand = r.get("baseline") or {}, r.get("candidate") or {}
        us = lambda t: f"{t['median_us']:.2f}" if t.get("median_us") is not None else "-"  # noqa: E731
        speedup = f"{r['speedup']:.3f}x" if r.get("speedup") else "-"
        lines.append(f"| {'x'.join(map(str, r['shape']))} | {us(base)} | {us(cand)} | {speedup} | "
                     f"{'yes' if r.get('correct') else 'NO' if r.get('correct') is False else '-'} |")
    return lines + [""]


def main(argv: list[str]) -> str:
    out, date, gpu, commit, command, *ops = argv
    out = Path(out)
    lines = ["# Tuned extracted kernels vs SGLang's ops", "",
             f"{date}, {gpu}, commit {commit}; reproduce: `{command}`", "",
             "Each op's original is extracted, knobs are derived from its launch path, the tuner searches them "
             "per shape, and the tuned kernel is timed against SGLang's own op by the harness (docs/timing.md).", ""]
    for op in ops:
        lines += op_section(out, op)
    text = "\n".join(lines)
    (out / "knobs.md").write_text(text)
    return text


if __name__ == "__main__":
    print(main(sys.argv[1:]))
