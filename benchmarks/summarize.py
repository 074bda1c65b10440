"""Summarize harness JSONL rows as a markdown table: geomean speedup over the paper shapes and over all
timed shapes, the range of per-shape speedups, the worst shape, and the largest shape's % of roofline,
per (op, candidate, baseline, dtype). Rows written before the JSONL kept labels show "?" for them.

Usage: python3 benchmarks/summarize.py [--set NAME] [--detail] RESULTS.jsonl|final.json [...]
(final.json: one evaluation as the tuner / agent loop saves it, e.g. RUN_DIR/final.json)
--set NAME  only the rows of a spec shape set (paper, models, quick, ... joined with +)
--detail    a second table per group: the shapes slower than the baseline (with their % of the copy roofline),
            % of the copy roofline at the shapes moving >= 256 MiB, and time over the empty kernel at <= 64
            tokens (rows)
"""
import argparse
import json
import math
from collections import defaultdict

from astra_sglang.specs.registry import get_spec, resolve_shapes

LARGE_BYTES = 256 << 20  # the roofline target's size (issue: shapes moving >= 256 MiB)
SMALL_TOKENS = 64  # the empty-kernel target's sizes (1-64 tokens)

ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ap.add_argument("paths", nargs="+")
ap.add_argument("--set", dest="shape_set")
ap.add_argument("--detail", action="store_true")
args = ap.parse_args()
groups = defaultdict(list)
def rows_of(path):
    if path.endswith(".json"):  # an EvalResult: its shape rows, labelled like write_jsonl's
        result = json.load(open(path))
        for shape in result["shapes"]:
            yield {**shape, "type": "shape", "kernel": result["kernel"], "candidate_label": result["candidate"],
                   "baseline_label": result["baseline"]}
    else:
        yield from (json.loads(line) for line in open(path))


in_set: dict[str, set] = {}  # op -> the shapes of --set, resolved once per op
for path in args.paths:
    for row in rows_of(path):
        if args.shape_set and row.get("kernel"):
            if row["kernel"] not in in_set:
                in_set[row["kernel"]] = {tuple(x) for x in resolve_shapes(get_spec(row["kernel"]), args.shape_set)}
            if tuple(row.get("shape", ())) not in in_set[row["kernel"]]:
                continue
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

if args.detail:
    print()
    print("| op | kernel | dtype | slower than the baseline (% roofline) | % roofline at >= 256 MiB (n) | x empty kernel at <= 64 "
          "tokens (n) |")
    print("|---|---|---|---|---|---|")
    for (op, cand, base, dtype), rows in sorted(groups.items()):
        slower = ", ".join(f"{'x'.join(map(str, r['shape']))} {r['speedup']:.3f}x ({r['pct_roofline']:.0f}%)"
                           for r in sorted(rows, key=lambda r: r["speedup"]) if r["speedup"] < 1.0) or "none"
        large = [r["pct_roofline"] for r in rows if r["min_bytes"] >= LARGE_BYTES]
        small = [r["candidate"]["median_us"] / r["empty_kernel_us"] for r in rows if r["shape"][0] <= SMALL_TOKENS]
        span = lambda v, fmt: f"{fmt.format(min(v))}-{fmt.format(max(v))} ({len(v)})" if v else "-"  # noqa: E731
        print(f"| {op} | {cand} | {dtype} | {slower} | {span(large, '{:.0f}%')} | {span(small, '{:.1f}x')} |")
