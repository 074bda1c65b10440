"""Per paper shape: what stands between a shipped kernel and the 1.32x target, from committed data only.

Usage: python3 benchmarks/bounds_table.py KERNELS_JSONL NCU_JSONL [DTYPE]
The ncu columns are only as current as NCU_JSONL: join rows and facts of the same builds.
Joins the harness rows (CUDA-graph replay, L2 cold, interleaved with SGLang's op; same-run SM-copy roofline
and empty-kernel time) with Nsight Compute facts of the same kernels (one launch each, ncu's own clock and
cache control), and prints a markdown table. "at 1.32x" is the copy-roofline fraction a kernel would need
to run 1.32x faster than SGLang's: above 100% the target is past the bandwidth bound; "x empty" is our
time over the empty kernel in a graph, the launch floor that small shapes sit on.
"""
from __future__ import annotations

import json
import sys

from astra_sglang.specs.registry import get_spec, resolve_shapes

TARGET = 1.32
LATENCY_BYTES = 8 << 20  # below ~8 MB a 4 TB/s kernel finishes in ~2 us: launch + DRAM latency dominate
OPS = ("silu_and_mul", "fused_add_rmsnorm", "rmsnorm", "merge_attn_states_lse")


def ncu_value(facts: dict, needle: str) -> float | None:
    return next((v for k, v in facts.items() if k.endswith(needle) or needle + " (" in k), None)


def load(kernels: str, ncu: str, dtype: str):
    rows = {}
    for line in open(kernels):
        r = json.loads(line)
        if r.get("type") == "shape" and r.get("speedup") and r["dtype"] == dtype:
            rows[(r["kernel"], tuple(r["shape"]))] = r
    facts = {}
    for line in open(ncu):
        r = json.loads(line)
        facts[(r["op"], tuple(r["shape"]), r["side"])] = r["facts"]
    return rows, facts


def bound(r: dict, needed_pct: float) -> str:
    if r["speedup"] >= TARGET:
        return "none: 1.32x met"
    if r["min_bytes"] < LATENCY_BYTES:
        return "latency (launch + one cold DRAM round trip)"
    if needed_pct > 100:
        return "bandwidth: 1.32x is past the copy roofline"
    return "bandwidth + tail: below the roofline, above SGLang by less than 1.32x"


def main(kernels: str, ncu: str, dtype: str = "bfloat16") -> None:
    rows, facts = load(kernels, ncu, dtype)
    print("| op | shape | MB moved | ours us | SGLang us | speedup | % copy roofline | at 1.32x | x empty | "
          "ncu DRAM % ours / SGLang | ncu occupancy % ours / SGLang | regs ours / SGLang | bound |")
    print("|---" * 13 + "|")
    for op in OPS:
        for shape in resolve_shapes(get_spec(op), "paper"):
            r = rows.get((op, tuple(shape)))
            if r is None:
                continue
            ours, base = r["candidate"]["median_us"], r["baseline"]["median_us"]
            pct = r.get("pct_roofline") or 0.0
            needed = pct * ours / (base / TARGET)  # the roofline fraction at base / 1.32 us
            f_o, f_s = facts.get((op, tuple(shape), "ours"), {}), facts.get((op, tuple(shape), "SGLang"), {})

            def pair(needle: str) -> str:
                a, b = ncu_value(f_o, needle), ncu_value(f_s, needle)
                return "/".join("-" if v is None else f"{v:.0f}" for v in (a, b))

            print(f"| {op} | {'x'.join(map(str, shape))} | {r['min_bytes'] / 1e6:.1f} | {ours:.2f} | {base:.2f} | "
                  f"{r['speedup']:.3f} | {pct:.0f}% | {needed:.0f}% | {ours / r['empty_kernel_us']:.1f} | "
                  f"{pair(': DRAM Throughput')} | {pair(': Achieved Occupancy')} | {pair(': Registers Per Thread')} | "
                  f"{bound(r, needed)} |")


if __name__ == "__main__":
    main(*sys.argv[1:])
