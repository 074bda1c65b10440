"""Why a shape times slower in an evaluation that checked it first (session 5: rmsnorm 16384x8192 ran ~146 us
after the checks, ~132 us without them, twice each; emptying the allocator cache in between changed nothing).

One process, one GpuSession (the harness's own timing), steps in order; each prints and appends to
OUTDIR/check_effect.jsonl ours / SGLang's median, the speedup, and the GPU's clocks, temperature and power
(nvidia-smi) just before the timing:
  time-1, time-2      unchecked, twice: drift within one process
  check               the harness's checks only (candidate, SGLang's op, agreement), no timing
  after-check         unchecked timing right after them
  after-fp64          unchecked timing right after an fp64 workload like the reference's (square, row mean)
  sleep-10            10 s idle, then unchecked timing: does a lingering clock or power state explain it?
Usage (GPU machine, repo root, after `source benchmarks/gpu/setup.sh`):
    python3 benchmarks/gpu/check_effect.py OUTDIR [OP [SHAPE]]      # default: rmsnorm 16384x8192
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import torch

from astra_sglang.harness.build import build_library
from astra_sglang.harness.gpu_eval import GpuSession
from astra_sglang.harness.records import EvalRequest, KernelSource
from astra_sglang.harness.worker import Progress
from astra_sglang.ops.adapters import KERNEL_BASELINES
from astra_sglang.paths import templates_dir
from astra_sglang.specs.registry import get_spec

QUERY = "clocks.sm,clocks.mem,temperature.gpu,power.draw"


def gpu_state() -> str:
    out = subprocess.run(["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader"], capture_output=True,
                         text=True)
    return out.stdout.strip() or out.stderr.strip()[:80]


def fp64_burn(shape, device) -> None:
    x = torch.randn(*shape, device=device, dtype=torch.float64)
    for _ in range(3):
        x.pow(2).mean(-1)
    torch.cuda.synchronize()


def main(out: str, op: str = "rmsnorm", shape_text: str = "16384x8192", dtype: str = "bfloat16") -> None:
    if not torch.cuda.is_available():
        raise SystemExit("check_effect.py: no CUDA GPU here (it times on one)")
    os.makedirs(out, exist_ok=True)
    spec, shape = get_spec(op), tuple(int(v) for v in shape_text.split("x"))
    source = os.path.abspath(f"patches/{op}/kernel.cu")
    req = EvalRequest(kernel=op, candidate=KernelSource(path=source), baseline=KernelSource(path=KERNEL_BASELINES[op]),
                      shapes=[shape], dtypes=[dtype], check=False, time=True)
    build = build_library(source)
    probes = build_library(templates_dir() / "probes.cu")
    session = GpuSession(spec, build.library, KERNEL_BASELINES[op], probes.library, req)
    progress = Progress(None)

    def step(name: str, check: bool, time_it: bool) -> None:
        session.req = req.model_copy(update={"check": check, "time": time_it})
        state = gpu_state()
        row = session.evaluate_shape(shape, dtype, progress)
        rec = {"step": name, "op": op, "shape": shape, "dtype": dtype, "gpu_state_before": state,
               "ours_us": row.candidate.median_us if row.candidate else None,
               "sglang_us": row.baseline.median_us if row.baseline else None, "speedup": row.speedup,
               "pct_roofline": row.pct_roofline, "correct": row.correct}
        with open(f"{out}/check_effect.jsonl", "a") as fh:
            fh.write(json.dumps(rec) + "\n")
        print(f"{name:12s} ours {rec['ours_us'] or 0:8.2f} us  SGLang {rec['sglang_us'] or 0:8.2f} us  "
              f"x{rec['speedup'] or 0:6.3f}  roof {rec['pct_roofline'] or 0:5.1f}%  [{QUERY}: {state}]", flush=True)

    step("time-1", False, True)
    step("time-2", False, True)
    step("check", True, False)
    step("after-check", False, True)
    fp64_burn(shape, session.device)
    step("after-fp64", False, True)
    time.sleep(10)
    step("sleep-10", False, True)


if __name__ == "__main__":
    main(*sys.argv[1:])
