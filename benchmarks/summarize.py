"""Summarize harness JSONL rows as a markdown table: geomean speedup over the paper shapes and over all
timed shapes, the range of per-shape speedups, the worst shape, and the largest shape's % of roofline,
per (op, candidate, baseline, dtype). Rows written before the JSONL kept labels show "?" for them.

Usage: python3 benchmarks/summarize.py RESULTS.jsonl|final.json [...]
(final.json: one evaluation as the tuner / agent loop saves it, e.g. RUN_DIR/final.json)
"""
import json
import math
import sys
from collections import defaultdict

from astra_sglang.specs.registry import get_spec

groups = defaultdict(list)
def rows_of(path):
    if path.endswith(".json"):  # an EvalResult: its shape rows, labelled like write_jsonl's
        result = json.load(open(path))
        for shape in result["shapes"]:
            yield {**shape, "type": "shape", "kernel": result["kernel"], "candidate_label": result["candidate"],
                   "baseline_label": result["baseline"]}
    else:
        yield from (json.loads(line) for line in open(path))


for path in sys.argv[1:]:
    for row in rows_of(path):
        if row.get("type") == "shape" and row.get("speedup"):
            key = (row["kernel"], row.get("candidate_label", "?"), row.get("baseline_label", "?"), row["dtype"])
            groups[key].append(row)


def geo(values):
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


print("| op | kernel | baseline | dtype | paper geomean | all-shapes geomean (n) | range | worst shape | "
      "largest shape % roofline |")
print("|---|---|---|---|---|---|---|---|---|")
for (op, cand, base, dtype), rows in sorted(groups.items()):
    paper = {tuple(s) for s in get_spec(op).shapes.paper}
    worst = min(rows, key=lambda r: r["speedup"])
    largest = max(rows, key=lambda r: r["min_bytes"])
    print(f"| {op} | {cand} | {base} | {dtype} | {geo([r['speedup'] for r in rows if tuple(r['shape']) in paper]):.3f}x"
          f" | {geo([r['speedup'] for r in rows]):.3f}x ({len(rows)}) | {worst['speedup']:.3f}-"
          f"{max(r['speedup'] for r in rows):.3f} | {'x'.join(map(str, worst['shape']))} "
          f"{worst['speedup']:.3f}x | {'x'.join(map(str, largest['shape']))} {largest['pct_roofline']:.0f}% |")
