#!/usr/bin/env bash
# One GPU call for the shipped kernels (patches/<op>/kernel.cu): each op against SGLang's own kernel,
# checked and timed by the harness (CUDA-graph replay, L2 cold, interleaved, same-run roofline).
# Usage (repo root, GPU machine, after `source benchmarks/gpu/setup.sh`):
#   bash benchmarks/gpu/kernels.sh OUTDIR STEP...
# Steps: time-bf16 | time-fp16 (paper + quick + large shapes), check (edge + held_out shapes in all three
# dtypes, against our first kernels: SGLang's refuse some of them), pdl (default dispatch with PDL off vs
# on, paper shapes, bf16, time only), sweep (knob variants, tuner-style entries, vs SGLang, bf16, time
# only, one line per shape). Full tables go to OUTDIR/kernels.log, rows to OUTDIR/kernels.jsonl.
set -u
OUTDIR=${1:?usage: kernels.sh OUTDIR STEP...}; shift
mkdir -p "$OUTDIR"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee -a "$OUTDIR/kernels.log"
PYTHONUNBUFFERED=1 python3 - "$OUTDIR" "$@" <<'PY' 2>&1 | tee -a "$OUTDIR/kernels.log"
import os, sys, time
from rich.console import Console
from astra_sglang.harness.isolate import evaluate
from astra_sglang.harness.records import EvalRequest, KernelSource
from astra_sglang.ops.adapters import KERNEL_BASELINES
from astra_sglang.harness.report import print_result, write_jsonl
from astra_sglang.patching.manifest import PatchManifest
from astra_sglang.specs.registry import get_spec, resolve_shapes

out, steps = sys.argv[1], sys.argv[2:]
ONLY = os.environ.get("OPS", "").split()  # e.g. OPS="merge_state" bash kernels.sh OUT time-bf16
console = Console(width=200)
SGLANG = KERNEL_BASELINES  # SGLang's own entry points, called exactly as SGLang calls them
LARGE = {  # >= 256 MiB moved: the roofline target
    "silu_and_mul": [], "fused_add_rmsnorm": [], "rmsnorm": [(16384, 8192)],
    "merge_attn_states_lse": [(16384, 32, 128)], "merge_state": [(16384, 32, 128)],
}
SMALL = {  # decode sizes: latency against the empty kernel
    "silu_and_mul": [(16, 14336)], "fused_add_rmsnorm": [(16, 4096)], "rmsnorm": [(16, 4096)],
    "merge_attn_states_lse": [(16, 32, 128)], "merge_state": [(16, 32, 128)],
}

def run(op, shapes, dtypes, baseline, check=True, timed=True, defines=None, label=None):
    manifest = PatchManifest.load(f"patches/{op}")  # merge_state builds merge_attn_states_lse's file, base 2
    req = EvalRequest(kernel=op, candidate=KernelSource(path=os.path.abspath(f"patches/{op}/{manifest.kernel}"),
                                                        defines={**manifest.defines, **(defines or {})},
                                                        label=label or f"patches/{op}"),
                      baseline=KernelSource(path=baseline if baseline.startswith("py:") else os.path.abspath(baseline))
                      if baseline else None, shapes=shapes, dtypes=dtypes,
                      check=check, time=timed, timeout_s=280)
    t0 = time.time()
    res = evaluate(req)
    print_result(res, console)
    write_jsonl(res, f"{out}/kernels.jsonl")
    print(f"[{op} {dtypes} {time.time() - t0:.0f}s]", flush=True)

SWEEP = {  # op: (shapes, [(label, knob args or None for the default entry, defines)])
    "fused_add_rmsnorm": ([(16, 4096), (128, 4096), (1024, 4096), (512, 14336), (8192, 4096)], [
        ("default", None, {}), ("pdl0", None, {"ASTRA_DEFAULT_PDL": "0"}), ("nc", None, {"ASTRA_FAR_NC": "1"}),
        ("defer", None, {"ASTRA_FAR_DEFER": "1"}), ("nc+defer", None, {"ASTRA_FAR_NC": "1", "ASTRA_FAR_DEFER": "1"}),
        ("256,2,1,1", "256, 2, 1, 1", {}), ("512,1,1,1", "512, 1, 1, 1", {}), ("64,8,1,1", "64, 8, 1, 1", {})]),
    "rmsnorm": ([(128, 4096), (256, 13824), (512, 14336), (8192, 4096)], [
        ("default", None, {}), ("pdl0", None, {"ASTRA_DEFAULT_PDL": "0"}), ("256,2,1,1", "256, 2, 1, 1", {}),
        ("512,1,1,1", "512, 1, 1, 1", {}), ("64,8,1,1", "64, 8, 1, 1", {})]),
    "silu_and_mul": ([(16, 4096), (64, 8192), (512, 14336), (8192, 14336)], [
        ("default", None, {}), ("pdl0", None, {"ASTRA_DEFAULT_PDL": "0"}), ("64,1,1", "64, 1, 1", {}),
        ("256,1,1", "256, 1, 1", {}), ("128,2,1", "128, 2, 1", {}), ("256,2,1", "256, 2, 1", {}),
        ("512,2,1", "512, 2, 1", {}), ("128,4,1", "128, 4, 1", {})]),
    "merge_attn_states_lse": ([(64, 32, 128), (512, 32, 256), (512, 40, 128), (8192, 32, 128)], [
        ("default", None, {}), ("pdl0", None, {"ASTRA_DEFAULT_PDL": "0"}), ("128,1,1,0", "128, 1, 1, 0", {}),
        ("128,1,1,1", "128, 1, 1, 1", {}), ("128,1,1,2", "128, 1, 1, 2", {}), ("256,1,1,0", "256, 1, 1, 0", {}),
        ("512,1,1,0", "512, 1, 1, 0", {}), ("128,2,1,0", "128, 2, 1, 0", {}), ("256,4,1,0", "256, 4, 1, 0", {})]),
}

def sweep():
    import tempfile
    folder = tempfile.mkdtemp(prefix="astra-sweep-")
    for op, (shapes, variants) in SWEEP.items():
        for label, knobs, defines in variants:
            path = os.path.abspath(f"patches/{op}/kernel.cu")
            if knobs:
                path = f"{folder}/{op}-{label.replace(',', '_')}.cu"
                src = open(f"patches/{op}/kernel.cu").read() + (
                    f"\nASTRA_ENTRY {{ return astra_launch_cfg<{knobs}>(tensors, num_tensors, scalars, num_scalars, "
                    "stream); }\n")
                open(path, "w").write(src)
                defines = {**defines, "ASTRA_NO_DEFAULT_ENTRY": "1"}
            req = EvalRequest(kernel=op, candidate=KernelSource(path=path, defines=defines, label=label),
                              baseline=KernelSource(path=SGLANG[op]), shapes=shapes, dtypes=["bfloat16"],
                              check=False, timeout_s=120)
            res = evaluate(req)
            write_jsonl(res, f"{out}/sweep.jsonl")
            if not res.ok:
                print(f"SWEEP {op:22s} {label:10s} FAILED {res.reason[:120]}", flush=True)
            for r in res.shapes:
                if r.candidate:
                    print(f"SWEEP {op:22s} {label:10s} {'x'.join(map(str, r.shape)):12s} cand {r.candidate.median_us:8.2f}"
                          f" base {r.baseline.median_us:8.2f} speedup {r.speedup:6.3f} roof {r.pct_roofline:5.1f}%",
                          flush=True)

for step in steps:
    if step == "sweep":
        sweep()
        continue
    for op, base in SGLANG.items():
        if ONLY and op not in ONLY:
            continue
        spec = get_spec(op)
        if step.startswith("time-"):
            dt = {"time-bf16": "bfloat16", "time-fp16": "float16"}[step]
            shapes = resolve_shapes(spec, "paper+quick") + SMALL[op] + LARGE[op]
            run(op, list(dict.fromkeys(shapes)), [dt], base)
        elif step == "check":
            shapes = resolve_shapes(spec, "edge+held_out")
            run(op, list(dict.fromkeys(shapes)), ["bfloat16", "float16", "float32"], None, timed=False)
        elif step == "pdl" and op != "merge_state":  # same file and launch as merge_attn_states_lse
            run(op, resolve_shapes(spec, "paper"), ["bfloat16"], f"patches/{op}/kernel.cu", check=False,
                defines={"ASTRA_DEFAULT_PDL": "0"}, label=f"{op} PDL off (baseline: PDL on)")
PY
