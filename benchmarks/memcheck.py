"""compute-sanitizer (memcheck, racecheck) over every shipped CUDA patch, one op after another: `astra-sglang patch
verify OP --no-time --sanitize` (a launch per dtype the patch serves and per edge, held-out, quick and paper shape
the sanitizer can afford, each synchronized so a finding is reported against that launch).

Usage (GPU machine, repo root): python3 benchmarks/memcheck.py [op ...]
Exits non-zero naming the ops that failed.
"""
import sys

from astra_sglang.cli import main
from astra_sglang.patchset.store import PatchStore

ops = sys.argv[1:] or [e.op for e in PatchStore("patches").entries() if e.manifest.kind == "cuda"]
failed = []
for op in ops:
    try:
        main(["patch", "verify", op, "--patches", "patches", "--no-time", "--sanitize"])
    except SystemExit as done:
        if done.code:
            failed.append(op)
sys.exit(f"failed: {', '.join(failed)}" if failed else 0)
