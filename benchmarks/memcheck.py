"""compute-sanitizer (memcheck, racecheck) over shipped CUDA patches, one op after another: `astra-sglang patch
verify OP --no-time --sanitize` (a launch per dtype the patch serves and per edge, held-out, quick and paper shape
the sanitizer can afford, each synchronized so a finding is reported against that launch).

Usage (GPU machine, repo root): python3 benchmarks/memcheck.py [--patches DIR] [--out JSONL] [op ...]
Default: every CUDA patch of DIR (default patches/). --out appends a line per op, {"op", "ok", "reason"}, which
benchmarks/families_record.py reads (a patch is enabled only once this passed). Exits non-zero naming the ops
that failed.
"""
import argparse
import json
import sys
from pathlib import Path

from astra_sglang.cli import main
from astra_sglang.patchset.store import PatchStore

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--patches", default="patches")
parser.add_argument("--out", type=Path)
parser.add_argument("ops", nargs="*")
args = parser.parse_args()
ops = args.ops or [e.op for e in PatchStore(args.patches).entries() if e.manifest.kind == "cuda"]
failed = []
for op in ops:
    try:
        main(["patch", "verify", op, "--patches", args.patches, "--no-time", "--sanitize"])
        code = 0
    except SystemExit as done:
        code = done.code
    if code:
        failed.append(op)
    if args.out:
        with args.out.open("a") as out:
            out.write(json.dumps({"op": op, "ok": not code, "reason": f"exit code {code}" if code else ""}) + "\n")
sys.exit(f"failed: {', '.join(failed)}" if failed else 0)
