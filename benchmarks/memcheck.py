"""compute-sanitizer (memcheck, racecheck) over shipped CUDA patches, one op after another: `astra-sglang patch
verify OP --no-time --sanitize` (a launch per dtype the patch serves and per edge, held-out, quick and paper shape
the sanitizer can afford, each synchronized so a finding is reported against that launch).

Usage (GPU machine, repo root): python3 benchmarks/memcheck.py [--patches DIR] [--out JSONL] [op ...]
Default: every CUDA patch of DIR (default patches/). --out appends a line per op, {"op", "ok", "reason"}, which
benchmarks/families_record.py reads (a patch is enabled only once this passed): a failure's reason is the last line
the verify printed (the sanitizer's finding, or why it could not run), else its exit code. Exits non-zero naming
the ops that failed.
"""
import argparse
import json
import subprocess
import sys
from pathlib import Path

from astra_sglang.patchset.store import PatchStore


def verify(op: str, patches: str) -> tuple[int, str]:
    """(exit code, its last line of output) of the verify, its output passed through as it comes."""
    proc = subprocess.Popen([sys.executable, "-m", "astra_sglang.cli", "patch", "verify", op, "--patches", patches,
                             "--no-time", "--sanitize"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    last = ""
    for line in proc.stdout:
        sys.stdout.write(line)
        last = line.strip() or last
    return proc.wait(), last


parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--patches", default="patches")
parser.add_argument("--out", type=Path)
parser.add_argument("ops", nargs="*")
args = parser.parse_args()
ops = args.ops or [e.op for e in PatchStore(args.patches).entries() if e.manifest.kind == "cuda"]
failed = []
for op in ops:
    code, last = verify(op, args.patches)
    if code:
        failed.append(op)
    if args.out:
        with args.out.open("a") as out:
            reason = (last or f"exit code {code}")[:300] if code else ""
            out.write(json.dumps({"op": op, "ok": not code, "reason": reason}) + "\n")
sys.exit(f"failed: {', '.join(failed)}" if failed else 0)
