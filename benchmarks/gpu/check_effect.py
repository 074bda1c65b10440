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
  (session 6: none of the above moved it, ~131 us each)
  check+time          checks and timing in one evaluate_shape call, as kernels.sh runs them
  check+time-noedge   the same without the edge cases (odd views, offsets) in the checks
  check+time-emptied  the same with gc + the allocator cache emptied between checks and timing
  (session 6: all three ~144 us; the steps above ~131 us. What differs between "check" + "after-check" and
  these: a new evaluate_shape call and the nvidia-smi query in between, so:)
  check+sleep+time    checks, 0.5 s idle, timing, in one call
  check+smi+time      checks, the nvidia-smi query, timing, in one call
  check, time-nosmi   the two steps back to back with no nvidia-smi query between them
  time-long           unchecked timing with 10x the replays (does the effect fade within one timing?)
  check+time-long     checks and that long timing in one call
  (session 6: check+sleep+time, check+smi+time and time-nosmi ~146 us; time-long and check+time-long ~131 us:
  a transient the short timing sat in. The harness now warms up for WARMUP_S seconds first:)
  check+time-nowarm   checks and timing as before WARMUP_S (3 rounds of warm-up)
  check+time-warm     checks and timing with the harness's defaults
Usage (GPU machine, repo root, after `source benchmarks/gpu/setup.sh`):
    python3 benchmarks/gpu/check_effect.py OUTDIR [OP [SHAPE]]      # default: rmsnorm 16384x8192
"""
from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import time
from functools import partial
from unittest import mock

import torch

from astra_sglang.harness import gpu_eval
from astra_sglang.harness.build import build_library
from astra_sglang.harness.gpu_eval import GpuSession
from astra_sglang.harness.records import EvalRequest, KernelSource
from astra_sglang.harness.timing import interleaved
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

    def step(name: str, check: bool, time_it: bool, query: bool = True, **update) -> None:
        session.req = req.model_copy(update={"check": check, "time": time_it, **update})
        state = gpu_state() if query else "not queried"
        row = session.evaluate_shape(shape, dtype, progress)
        rec = {"step": name, "op": op, "shape": shape, "dtype": dtype, "gpu_state_before": state,
               "ours_us": row.candidate.median_us if row.candidate else None,
               "sglang_us": row.baseline.median_us if row.baseline else None, "speedup": row.speedup,
               "pct_roofline": row.pct_roofline, "correct": row.correct}
        with open(f"{out}/check_effect.jsonl", "a") as fh:
            fh.write(json.dumps(rec) + "\n")
        print(f"{name:18s} ours {rec['ours_us'] or 0:8.2f} us  SGLang {rec['sglang_us'] or 0:8.2f} us  "
              f"x{rec['speedup'] or 0:6.3f}  roof {rec['pct_roofline'] or 0:5.1f}%  [{QUERY}: {state}]", flush=True)

    step("time-1", False, True)
    step("time-2", False, True)
    step("check", True, False)
    step("after-check", False, True)
    fp64_burn(shape, session.device)
    step("after-fp64", False, True)
    time.sleep(10)
    step("sleep-10", False, True)
    step("check+time", True, True)
    step("check+time-noedge", True, True, edge_cases=False)
    checks = session._check

    def check_then(after):
        def run(*args) -> None:
            checks(*args)
            torch.cuda.synchronize()
            after()
        return run

    session._check = check_then(lambda: (gc.collect(), torch.cuda.empty_cache()))
    step("check+time-emptied", True, True)
    session._check = checks
    step("check+time-2", True, True)
    session._check = check_then(lambda: time.sleep(0.5))
    step("check+sleep+time", True, True)
    session._check = check_then(gpu_state)
    step("check+smi+time", True, True)
    session._check = checks
    step("check-2", True, False)
    step("time-nosmi", False, True, query=False)
    with mock.patch.object(gpu_eval, "interleaved", partial(interleaved, replays=200, warmup_s=0.0)):
        step("time-long", False, True)
        step("check+time-long", True, True)
    with mock.patch.object(gpu_eval, "interleaved", partial(interleaved, warmup_s=0.0)):  # before WARMUP_S
        step("check+time-nowarm", True, True)
    step("check+time-warm", True, True)


if __name__ == "__main__":
    main(*sys.argv[1:])
