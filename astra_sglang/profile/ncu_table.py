"""Nsight Compute numbers per shape: our shipped patch vs SGLang's own op, one launch each, L2 flushed
(`astra-sglang bench OP --ncu OUTDIR`, or benchmarks/ncu_table.py for several ops and the saved tables).

Writes OUTDIR/ncu.jsonl (every section fact) and prints a markdown table of the facts that explain a
memory-bound kernel's gap: duration, DRAM throughput (% of peak and GB/s), achieved occupancy, registers,
grid/block, warp cycles per issued instruction. Default shapes: every paper shape of the four shipped ops;
the item `paper` adds them to op:TxD items.
All shapes of one (op, side) share one ncu process (NcuProfiler.profile_many): 8 processes, not 52.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from astra_sglang.baselines.adapters import KERNEL_BASELINES
from astra_sglang.harness.build import build_library
from astra_sglang.harness.ncu import STALL_METRICS, NcuProfiler
from astra_sglang.patchset.manifest import PatchManifest
from astra_sglang.specs.registry import get_spec, resolve_shapes

SGLANG = KERNEL_BASELINES
DEFAULT_OPS = ("silu_and_mul", "fused_add_rmsnorm", "rmsnorm", "merge_attn_states_lse")
DTYPE = "bfloat16"
TIME_UNITS = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}
# ncu scales rate units ("byte/s", "Gbyte/second", ...) unless --print-units base; read them all as GB/s.
RATE_UNITS = {f"{prefix}byte/{per}": scale for prefix, scale in (("", 1e-9), ("K", 1e-6), ("M", 1e-3), ("G", 1.0),
                                                                 ("T", 1e3)) for per in ("s", "second")}
COLUMNS = {  # table column -> (": metric name" in the facts, the units it may carry -> scale; None: any)
    # section titles and units differ between ncu versions, so keys are matched on the metric name
    "us": (": Duration", TIME_UNITS),
    "DRAM %": (": DRAM Throughput", None),
    # MemoryWorkloadAnalysis's "Memory Throughput" is DRAM bytes/s (SpeedOfLight's same name is a %,
    # which the unit filter skips)
    "DRAM GB/s": (": Memory Throughput", RATE_UNITS),
    "occupancy %": (": Achieved Occupancy", None),
    "regs": (": Registers Per Thread", None), "grid": (": Grid Size", None), "block": (": Block Size", None),
    "cycles/issue": (": Warp Cycles Per Issued Instruction", None),
    # of those cycles, stalled on: global loads / shuffles + shared memory / barriers / fixed latency
    **{f"stall {short}": (f": {metric}", None) for short, metric in zip(("long", "short", "bar", "wait"), STALL_METRICS)},
}
_KERNEL_PREFIX = re.compile(r"^kernel (\d+): ")  # profile_many's prefix where an op launched several kernels


def pick(facts: dict, needle: str, units: dict | None = None):
    for key, value in facts.items():
        if not (needle + " (" in key or key.endswith(needle)):
            continue
        unit = key[key.rfind("(") + 1:-1] if key.endswith(")") else ""
        if units is None:
            return value
        if unit in units:
            return value * units[unit]
    return None


def kernel_count(facts: dict) -> int:
    return len({m.group(1) for key in facts if (m := _KERNEL_PREFIX.match(key))}) or 1


def row(op: str, shape_text: str, side: str, facts: dict) -> str:
    cells = [pick(facts, needle, units) for needle, units in COLUMNS.values()]
    kernels = kernel_count(facts)
    if kernels > 1:  # the cells are the first kernel's: say so rather than pass them off as the op's
        side += f" ({kernels} kernels, 1st shown)"
    return f"| {op} | {shape_text} | {side} | " + " | ".join(
        "-" if c is None else f"{c:.2f}" if c < 100 else f"{c:.0f}" for c in cells) + " |"


HEADER = ["| op | shape | side | " + " | ".join(COLUMNS) + " |", "|---" * (len(COLUMNS) + 3) + "|"]


def from_jsonl(path: Path) -> str:
    """The table again from a saved ncu.jsonl (no GPU needed)."""
    lines = list(HEADER)
    for line in path.read_text().splitlines():
        r = json.loads(line)
        lines.append(row(r["op"], "x".join(map(str, r["shape"])), r["side"], r["facts"]))
    return "\n".join(lines) + "\n"


def stall_shares(path: Path, side: str = "ours") -> str:
    """Per shape of a saved ncu.jsonl: each stall reason's share of the warp cycles per issued instruction, with
    the reduction's two (short scoreboard: shuffles and shared memory; barriers) summed. No GPU needed."""
    lines = ["| op | shape | cycles / issue | long scoreboard % | short scoreboard % | barrier % | wait % "
             "| short + barrier % |", "|---" * 8 + "|"]
    for line in path.read_text().splitlines():
        r = json.loads(line)
        cpi = pick(r["facts"], ": Warp Cycles Per Issued Instruction")
        stalls = [pick(r["facts"], f": {metric}") for metric in STALL_METRICS]
        if r["side"] != side or not cpi or None in stalls:
            continue
        long, short, bar, wait = (100 * s / cpi for s in stalls)
        lines.append(f"| {r['op']} | {'x'.join(map(str, r['shape']))} | {cpi:.1f} | {long:.0f} | {short:.0f} | "
                     f"{bar:.0f} | {wait:.0f} | {short + bar:.0f} |")
    return "\n".join(lines) + "\n"


def wanted_shapes(items: list[str]) -> dict[str, list[tuple[int, ...]]]:
    """op:TxD items (and with `paper` or no items, every paper shape of the four ops) grouped by op."""
    grouped: dict[str, list[tuple[int, ...]]] = {}
    if not items or "paper" in items:
        grouped = {op: list(resolve_shapes(get_spec(op), "paper")) for op in DEFAULT_OPS}
    for item in items:
        if item == "paper":
            continue
        op, shape_text = item.split(":")
        shape = tuple(int(n) for n in shape_text.split("x"))
        if shape not in grouped.setdefault(op, []):
            grouped[op].append(shape)
    return grouped


def main(out: Path, items: list[str], patches: Path = Path("patches")) -> None:
    """Profiles the patch in `patches` and SGLang's op at each op:TxD item (or every paper shape of the four
    ops); writes OUT/ncu.{jsonl,md} and prints each row as it comes."""
    out.mkdir(parents=True, exist_ok=True)
    lines = list(HEADER)
    for op, shapes in wanted_shapes(items).items():
        manifest = PatchManifest.load(patches / op)
        build = build_library(patches / op / manifest.kernel, dict(manifest.defines), None)
        profiler = NcuProfiler(op)
        sides = {side: profiler.profile_many(library, shapes, DTYPE)  # one ncu process per (op, side)
                 for side, library in (("ours", build.library), ("SGLang", SGLANG[op]))}
        with open(out / "ncu.jsonl", "a") as fh:
            for i, shape in enumerate(shapes):
                for side, per_shape in sides.items():
                    fh.write(json.dumps({"op": op, "shape": shape, "dtype": DTYPE, "side": side,
                                         "facts": per_shape[i]}) + "\n")
                    lines.append(row(op, "x".join(map(str, shape)), side, per_shape[i]))
                    print(lines[-1], flush=True)
    (out / "ncu.md").write_text("\n".join(lines) + "\n")
