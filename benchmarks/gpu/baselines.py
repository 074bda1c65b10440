"""One GPU call's worth of evaluations for the harness and extraction issues: our first kernels and the
extracted originals, each checked on every shape set and timed against SGLang's own entry points.

Usage (repo root, GPU machine, after `source benchmarks/gpu/setup.sh`):
    python3 benchmarks/gpu/baselines.py OUTDIR [EXTRACT_DIR]
Writes OUTDIR/baselines.log (tables) and OUTDIR/baselines.jsonl (rows).
"""
import sys
from pathlib import Path

from rich.console import Console

from astra_sglang.harness.isolate import evaluate
from astra_sglang.harness.records import EvalRequest, KernelSource
from astra_sglang.ops.adapters import KERNEL_BASELINES
from astra_sglang.harness.report import print_result, write_jsonl
from astra_sglang.paths import kernels_dir
from astra_sglang.specs.registry import get_spec, resolve_shapes

SGLANG = KERNEL_BASELINES  # SGLang's own entry points, called exactly as SGLang calls them

out = Path(sys.argv[1])
extracted = Path(sys.argv[2]) if len(sys.argv) > 2 else Path("work/extract")
log = (out / "baselines.log").open("a")
console = Console(file=log, width=200)
screen = Console(width=200)


def run(op: str, candidate: Path, label: str, shapes: str, dtypes: list[str], time: bool) -> None:
    spec = get_spec(op)
    req = EvalRequest(kernel=op, candidate=KernelSource(path=str(candidate), label=label),
                      baseline=KernelSource(path=SGLANG[op], label="sglang:" + SGLANG[op].rsplit(":", 1)[-1]),
                      shapes=resolve_shapes(spec, shapes), dtypes=[d for d in dtypes if d in spec.dtypes],
                      time=time, timeout_s=900)
    result = evaluate(req)
    for c in (console, screen):
        c.print(f"\n## {op}: {label} vs SGLang ({shapes}, {', '.join(req.dtypes)}, {'timed' if time else 'checked'})")
        print_result(result, c)
    write_jsonl(result, out / "baselines.jsonl")


for op in SGLANG:
    candidates = [(kernels_dir() / f"{op}.cu", f"ours:{op}")]
    candidates += [(d / "kernel.cu", "extracted:" + d.name) for d in sorted(extracted.glob(f"{op}-*"))]
    for path, label in candidates:
        run(op, path, label, "edge+held_out", ["bfloat16", "float16", "float32"], time=False)
        run(op, path, label, "paper+quick", ["bfloat16"], time=True)
