"""Per-call cost of each enabled patch versus SGLang's original, Python dispatch included (eager, no CUDA graph):
astra_sglang/serving/per_call.py over a whole patch set (`astra-sglang bench OP --per-call` times one op).

Usage (repo root, GPU machine with sglang, sgl_kernel, flashinfer, torch):
    python3 benchmarks/per_call.py OUTDIR [--tokens 1,16,64,8192] [--patches DIR]   # OUTDIR/per_call.{jsonl,md}
"""
import argparse
import sys
from pathlib import Path

from astra_sglang.serving.per_call import TOKENS, main

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("outdir", type=Path)
parser.add_argument("--tokens", default=",".join(map(str, TOKENS)),
                    help="comma-separated token counts (rows) per op (default %(default)s)")
parser.add_argument("--patches", type=Path, default=Path("patches"),
                    help="patch set whose enabled patches are timed (default %(default)s)")
args = parser.parse_args()
sys.exit(main(args.outdir, tuple(int(t) for t in args.tokens.split(",")), args.patches))
