"""Nsight Compute numbers per shape: our shipped patch vs SGLang's own op, one launch each, L2 flushed
(astra_sglang/profile/ncu_table.py; `astra-sglang bench OP --ncu OUTDIR` profiles one op).

Usage (GPU machine, repo root, after `source benchmarks/gpu/setup.sh`):
    python3 benchmarks/ncu_table.py OUTDIR [paper] [op:TxD ...]
    python3 benchmarks/ncu_table.py --from-jsonl OUTDIR/ncu.jsonl   (the table again, anywhere)
    python3 benchmarks/ncu_table.py --stall-shares OUTDIR/ncu.jsonl [SIDE]   (stall reasons as % of cycles, ours)
"""
import sys
from pathlib import Path

from astra_sglang.profile.ncu_table import from_jsonl, main, stall_shares

if __name__ == "__main__":
    if sys.argv[1] == "--from-jsonl":
        print(from_jsonl(Path(sys.argv[2])), end="")
    elif sys.argv[1] == "--stall-shares":
        print(stall_shares(Path(sys.argv[2]), *sys.argv[3:4]), end="")
    else:
        main(Path(sys.argv[1]), sys.argv[2:])
