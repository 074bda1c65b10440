"""Summarize harness JSONL rows as a markdown table: geomean speedup over the paper shapes and over all
timed shapes, the range of per-shape speedups, the worst shape, and the largest shape's % of roofline,
per (op, candidate, baseline, dtype). Rows written before the JSONL kept labels show "?" for them.

Usage: python3 benchmarks/summarize.py RESULTS.jsonl [...]
"""
import json
import math
import sys
from collections import defaultdict

from astra_sglang.specs.registry import get_spec

groups = defaultdict(list)
for path in sys.argv[1:]:
    for line in open(path):
        row = json.loads(line)
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
