#!/usr/bin/env bash
# One GPU call: the shipped kernels (patches/<op>/kernel.cu) against the peers a user could pick instead,
# Liger-Kernel 0.8.5's Triton ops and torch.compile (astra_sglang/ops/peers.py), bf16, paper + quick shapes,
# timed by the harness (CUDA-graph replay, L2 cold, interleaved, same-run roofline), time only (check=False).
# Each peer is first checked once in this process on the quick shapes with the harness's own Checker (fresh
# inputs, stream order, buffer reuse, edge cases), which also fills the Triton / inductor caches the timing
# children then hit. Rows (candidate_label patches/<op>, baseline_label liger | torch.compile) are appended to
# OUTDIR/peers.jsonl, check verdicts to OUTDIR/peers-check.jsonl, tables to OUTDIR/peers.log; the end prints
# each op's geomean speedup (peer time / ours: > 1 = ours faster) and its worst shape.
# Usage (repo root, GPU machine, carry .stage and .whl; .whl/ holds `pip download liger-kernel==0.8.5 --no-deps`):
#   source benchmarks/gpu/setup.sh && bash benchmarks/gpu/peers.sh OUTDIR
# Cost (estimated, not yet measured): 6 isolated evaluations at ~8 s each plus timing and one inductor compile
# per shape, plus the check: about 3 minutes.
set -u
OUTDIR=${1:?usage: peers.sh OUTDIR}
mkdir -p "$OUTDIR"
case ":${PYTHONPATH:-}:" in
  *:/tmp/site:*) ;;
  *) echo "source benchmarks/gpu/setup.sh first (it sets PYTHONPATH=/tmp/site)"; exit 1;;
esac
# Same place as the SGLang runtime kit (../shared/device/sglang-runtime/README.md): no index, no dependencies.
python3 -m pip install -q --no-deps --no-index --upgrade --target /tmp/site .whl/liger_kernel-*.whl 2>&1 \
  | grep -v -i warning || true
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee -a "$OUTDIR/peers.log"
PYTHONUNBUFFERED=1 python3 - "$OUTDIR" <<'PY' 2>&1 | tee -a "$OUTDIR/peers.log"
import json, os, sys, time

import torch
from rich.console import Console

from astra_sglang.harness.check import Checker
from astra_sglang.harness.gpu_eval import python_op
from astra_sglang.harness.isolate import evaluate
from astra_sglang.harness.records import EvalRequest, KernelSource
from astra_sglang.harness.report import print_result, write_jsonl
from astra_sglang.ops.peers import PEERS
from astra_sglang.specs.registry import get_spec, resolve_shapes

out = sys.argv[1]
console = Console(width=200)
OPS = ["silu_and_mul", "fused_add_rmsnorm", "rmsnorm"]
peers = ["liger", "torch.compile"]
try:
    import liger_kernel.ops.fused_add_rms_norm  # noqa: F401
    import liger_kernel.ops.rms_norm  # noqa: F401
    import liger_kernel.ops.swiglu  # noqa: F401
    import triton
    print(f"liger_kernel imported (triton {triton.__version__}, torch {torch.__version__})")
except Exception as exc:  # noqa: BLE001
    print(f"LIGER SKIPPED: cannot import liger_kernel ({type(exc).__name__}: {exc})")
    peers.remove("liger")


def check(op, peer):
    """The harness's correctness trials for the peer alone (bf16, quick shapes), in this process."""
    spec, stream = get_spec(op), torch.cuda.Stream()
    launch = python_op(spec, PEERS[op][peer])
    with open(f"{out}/peers-check.jsonl", "a") as f:
        for shape in resolve_shapes(spec, "quick"):
            try:
                with torch.cuda.stream(stream):
                    v = Checker(spec, shape, "bfloat16", torch.device("cuda"), 0).run(
                        lambda a: launch(a.tensors, a.scalars))
                row = {"ok": v.ok, "covered": v.covered, "err_ratio": v.err_ratio, "reason": v.reason}
            except Exception as exc:  # noqa: BLE001 (a fault here must not stop the timings)
                row = {"ok": False, "covered": True, "err_ratio": None, "reason": f"{type(exc).__name__}: {exc}"}
            f.write(json.dumps({"kernel": op, "peer": peer, "shape": shape, "dtype": "bfloat16", **row}) + "\n")
            ratio = "-" if row["err_ratio"] is None else f"{row['err_ratio']:.2f}"
            print(f"CHECK {op:18s} {peer:14s} {'x'.join(map(str, shape)):11s} "
                  f"{'ok' if row['ok'] else 'FAIL'} err/tol {ratio} {row['reason'][:140]}", flush=True)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


t0 = time.time()
for op in OPS:
    for peer in peers:
        check(op, peer)
print(f"[check {time.time() - t0:.0f}s]", flush=True)

summary = []
for op in OPS:
    shapes = resolve_shapes(get_spec(op), "paper+quick")
    for peer in peers:
        req = EvalRequest(kernel=op, candidate=KernelSource(path=os.path.abspath(f"patches/{op}/kernel.cu"),
                                                            label=f"patches/{op}"),
                          baseline=KernelSource(path=PEERS[op][peer], label=peer), shapes=shapes,
                          dtypes=["bfloat16"], check=False, time=True, timeout_s=280)
        t1 = time.time()
        res = evaluate(req)
        print_result(res, console)
        write_jsonl(res, f"{out}/peers.jsonl")
        timed = [s for s in res.shapes if s.speedup]
        worst = min(timed, key=lambda s: s.speedup) if timed else None
        summary.append((op, peer, res.geomean_speedup, worst, len(timed), len(shapes), res.ok, res.reason))
        print(f"[{op} vs {peer} {time.time() - t1:.0f}s]", flush=True)

print("\nSUMMARY speedup = peer time / ours (> 1: ours faster), bf16, paper+quick shapes")
for op, peer, geo, worst, n, total, ok, reason in summary:
    geo_s = f"{geo:6.3f}x" if geo else "   n/a "
    worst_s = f"worst {'x'.join(map(str, worst.shape))} {worst.speedup:.3f}x" if worst else "worst n/a"
    tail = "" if ok else f"  FAILED: {reason[:120]}"
    print(f"PEERS {op:18s} vs {peer:14s} geomean {geo_s} {worst_s:28s} timed {n}/{total}{tail}")
print(f"[total {time.time() - t0:.0f}s]")
PY
