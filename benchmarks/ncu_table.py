"""Nsight Compute numbers per shape: our shipped patch vs SGLang's own op, one launch each, L2 flushed.

Usage (GPU machine, repo root, after `source benchmarks/gpu/setup.sh`):
    python3 benchmarks/ncu_table.py OUTDIR [op:TxD ...]
    python3 benchmarks/ncu_table.py --from-jsonl OUTDIR/ncu.jsonl   (the table again, anywhere)
Writes OUTDIR/ncu.jsonl (every section fact) and prints a markdown table of the facts that explain a
memory-bound kernel's gap: duration, DRAM throughput % of peak, achieved occupancy, registers, grid/block,
warp cycles per issued instruction. Default shapes: where benchmarks/notes/kernels.md found us slowest.
"""
import json
import sys
from pathlib import Path

from astra_sglang.harness.build import build_library
from astra_sglang.harness.profile import NcuProfiler
from astra_sglang.ops.adapters import ADAPTERS
from astra_sglang.patching.manifest import PatchManifest

SGLANG = {"silu_and_mul": "py:astra_sglang.ops.adapters:sglang_silu_and_mul",
          "fused_add_rmsnorm": "py:sgl_kernel:fused_add_rmsnorm", "rmsnorm": "py:sgl_kernel:rmsnorm",
          "merge_attn_states_lse": "py:sgl_kernel:merge_state_v2", "merge_state": ADAPTERS["merge_state"]}
DEFAULT = ["fused_add_rmsnorm:256x13824", "fused_add_rmsnorm:512x14336", "fused_add_rmsnorm:2048x8192",
           "rmsnorm:256x13824", "rmsnorm:512x14336", "rmsnorm:16384x8192", "silu_and_mul:16x4096",
           "silu_and_mul:512x14336", "merge_attn_states_lse:512x32x256"]
COLUMNS = {  # table column -> ": metric name" in the facts (section titles and units differ between versions)
    "us": ": Duration", "DRAM %": ": DRAM Throughput", "occupancy %": ": Achieved Occupancy",
    "regs": ": Registers Per Thread", "grid": ": Grid Size", "block": ": Block Size",
    "cycles/issue": ": Warp Cycles Per Issued Instruction",
}


def pick(facts: dict, needle: str):
    for key, value in facts.items():
        if needle + " (" in key or key.endswith(needle):
            return value * (1e-3 if "Duration" in needle and "(ns" in key else 1e3 if "Duration" in needle and "(ms" in key
                            else 1.0)
    return None


def row(op: str, shape_text: str, side: str, facts: dict) -> str:
    cells = [pick(facts, needle) for needle in COLUMNS.values()]
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


def main(out: Path, wanted: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    lines = list(HEADER)
    for item in wanted:
        op, shape_text = item.split(":")
        shape = tuple(int(n) for n in shape_text.split("x"))
        manifest = PatchManifest.load(Path("patches") / op)
        build = build_library(Path("patches") / op / manifest.kernel, dict(manifest.defines), None)
        profiler = NcuProfiler(op)
        for side, library in (("ours", build.library), ("SGLang", SGLANG[op])):
            facts = profiler.profile(library, shape, "bfloat16")
            with open(out / "ncu.jsonl", "a") as fh:
                fh.write(json.dumps({"op": op, "shape": shape, "dtype": "bfloat16", "side": side, "facts": facts}) + "\n")
            lines.append(row(op, shape_text, side, facts))
            print(lines[-1], flush=True)
    (out / "ncu.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    if sys.argv[1] == "--from-jsonl":
        print(from_jsonl(Path(sys.argv[2])), end="")
    else:
        main(Path(sys.argv[1]), sys.argv[2:] or DEFAULT)
