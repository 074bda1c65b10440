"""What a fused MoE two-tier run costs on a host, measured: the workers' start, a batch size's preparation and
recording, Triton's compiles on the CPU cores, a config's GPU time at a batch size, the strict evaluations.

The figures are from two runs on 4x H200 (Triton 3.6.0, SGLang 0.5.17), each field naming its own:
- RUN_A: 2026-11-27, commit ff157ed, `ASTRA_COMMIT=ff157ed DEADLINE=350 bash benchmarks/gpu/moe_screen.sh OUT`
  (benchmarks/results/2026-11-27-h200/moe-screen/): Qwen3's space at batch 64 on one GPU, 30 compile processes on
  a 64-core host;
- RUN_B: 2026-11-27, commit 45b7284, `ASTRA_COMMIT=45b7284 GPUS=2 CORES=36 SHAPES=qwen3,mixtral BUCKETS=16,64
  DEADLINE=420 bash benchmarks/gpu/moe_tiers.sh OUT` (benchmarks/results/2026-11-27-h200/moe-tiers/): GPU 2 alone,
  36 compile processes on 40 CPUs while the other three GPUs ran other work; Mixtral's 1,504 configs at batch 64
  screened in 97 s (units.jsonl, screen/mixtral@64.jsonl).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from astra_sglang.optimize.tuner.graph_timing import fitted_launches
from astra_sglang.optimize.tuner.moe_order import gpu_model

REFERENCE_GPU = "NVIDIA H200"
REFERENCE_US = {
    (128, 768, 2048, 8): {1: 54.1, 16: 250.0, 64: 382.7, 256: 420.3, 1024: 517.9, 4096: 1072.9},
    (8, 14336, 4096, 2): {1: 253.7, 16: 757.8, 64: 874.0, 256: 1045.9, 1024: 2176.5, 4096: 7523.8},
}
"""SGLang's shipped pick per expert shape (experts, N, hidden, top-k; bf16) and batch size: the strict evaluator's
median in RUN_A's final evaluations (its tune-qwen3/final.json and tune-mixtral/final.json, not committed)."""
SCREEN_RATIO = 0.86
"""SGLang's pick's screening time over its strict evaluator time (REFERENCE_US): 0.76 at Mixtral's batch 64 and
0.86 at 16 in RUN_B (665.6 vs 874.0 us, 653.8 vs 757.8), 0.77 at Qwen3's 64 in RUN_A (294.5 vs 382.7); the
largest, so that a config's GPU time is not underestimated."""


@dataclass(frozen=True)
class Costs:
    start_s: float = 36.0
    """Workers up (SGLang imported, weights drawn) and their first batch sizes prepared: 36 s in RUN_A
    (moe_screen.jsonl's cold phase: start_s 35.8)."""
    prepare_s: float = 3.0
    """A batch size's inputs, routings and fp32 reference on a worker (RUN_A: the tiers' first results 2.4-3.6 s
    into a batch size, its recording and first compile included)."""
    record_s: float = 0.0012
    """Recording one config's compiles with the compile processes idle (RUN_A: the cold phase's first result 2.7 s
    after its start, 1,504 recorded). With 36 compile processes busy on 40 CPUs, RUN_B's mixtral@16 had its first
    result 29 s after its start (the batch size prepared, 1,502 configs recorded, SGLang's pick timed): the plan
    records every unit before the first compile."""
    compile_start_s: float = 22.0
    """From the first compiles queued to the first config compiled (the processes spawned, each importing the
    kernel's module): RUN_B's mixtral@64 had its second result (the first that needed a compile) 22.7 s in."""
    compile_s: float = 0.66
    """Seconds of one compile process a specialization: RUN_B's host, over the 9,014 specializations it queued ahead
    (summary.md), timed from its console log, which is not among the committed results (a rerun of its command
    gives it). The committed figure is RUN_A's: 0.93 CPU-s each (moe_screen.jsonl's cold phase: compile_s 2,805
    CPU-s for compile_jobs 3,006 on 30 processes)."""
    fp8_compile_factor: float = 1.6
    """An fp8_w8a8 specialization's compile over a bf16 one's. The compile-bound screens at batch 1 on H200 (the
    moe-bar page, 2026-11-27: each unit's start plus wall x its compile processes over the specializations it
    reached, less compile_start_s) gave 0.63 CPU-s a specialization for Mixtral TP2 in bf16 (30 processes), 0.74
    for Qwen3-30B-A3B and 0.61 for DeepSeek-V2-Lite (22), and 1.01 for Mixtral TP2 in fp8_w8a8 (30): 1.6x its bf16
    twin. The plan at 0.66 had that fp8 screen end at 141 s; the deadline cut it 28 configs short."""
    jobs_per_config: int = 2
    """Fused MoE's two GEMMs: two specializations a config at each batch size (RUN_B: hits 2 in every config's
    row). Batch sizes do not share them: RUN_B's mixtral@16 compiled its own after mixtral@64 had compiled the same
    configs."""
    overhead_s: float = 0.0137
    """A timed config's GPU-side cost besides its calls (the check call, the graph's capture, the kernels' load,
    the worker's round trip): RUN_B's mixtral@64, each config's seconds less (1 + 11 x 5) calls of its time (done)
    or (1 + 2 x 5) (cut): 13.7 ms a config, median 13.5 (the old 9 ms was RUN_A's estimate)."""
    done_share: float = 0.74
    """Configs timed in full, of those timed: RUN_B's mixtral@64 978 of 1,320 (RUN_A's qwen3@64 954 of 1,320)."""
    done_factor: float = 1.172
    """A config timed in full runs at this x SGLang's pick on average (RUN_B's mixtral@64: mean of 977)."""
    slow_factor: float = 3.244
    """A config cut after one replay (past 1.5x the best) runs at this x SGLang's pick (mean of 342)."""
    eval_fixed_s: float = 39.0
    eval_bucket_s: float = 3.0
    final_bucket_s: float = 6.0
    """A strict evaluation of one batch size on an H200 (2026-11-27, the five ours-* runs committed under
    benchmarks/results/2026-11-27-h200/moe-bar: tiers/bench.log's round lines and tiers/strict/*/final.json's wall_s):
    rounds 29-48 s, median 42 of 10; finals 28.5-54.2 s, median 45.2 of 5; the lower ones alone on the host, the
    higher beside another job's compiles. Earlier (RUN_A, uncommitted): ~45 s a round's of 6 batch sizes, 55-58 s a
    final's. The split into a fixed part and 3 s (a round) or 6 s (a final) per batch size is assumed."""
    replays: int = 10
    warmup: int = 1
    slack: float = 0.1
    """Assumed: a plan fits in this much less than the deadline (its rates are one host's, other work moves them)."""

    @property
    def config_compile_s(self) -> float:
        """Seconds of one compile process a config."""
        return self.jobs_per_config * self.compile_s


def call_us(shape: tuple[int, int, int, int], tokens: int, gpu: str) -> float:
    """SGLang's pick's screening time at `tokens`: the reference's, interpolated in log-log between its batch sizes
    (the end slopes beyond), scaled by SCREEN_RATIO and by memory bandwidth to another GPU; a shape without a
    reference gets the cost model's best prediction over SGLang's space."""
    table = REFERENCE_US.get(tuple(shape))
    if table is None:
        from astra_sglang.optimize.tuner.moe_order import predict_us
        from astra_sglang.triton.moe.shapes import MoeShape
        from astra_sglang.triton.moe.space import SPACES

        s = MoeShape(*shape)
        return min(predict_us(c, tokens, s, gpu_model(gpu)) for c in SPACES["sglang"]())
    keys = sorted(table)
    lo = max([k for k in keys if k <= tokens] or keys[:1])
    i = min(keys.index(lo), len(keys) - 2)
    a, b = keys[i], keys[i + 1]
    slope = math.log(table[b] / table[a]) / math.log(b / a)
    us = table[a] * (tokens / a) ** slope * SCREEN_RATIO
    return us * gpu_model(REFERENCE_GPU).bandwidth / gpu_model(gpu).bandwidth


def config_s(us: float, costs: Costs) -> float:
    """Mean GPU seconds a config takes to screen where SGLang's pick screens in `us`."""
    calls = fitted_launches(us)  # fitted once a batch size, to SGLang's pick
    done = (1 + (costs.warmup + costs.replays) * calls) * us * costs.done_factor * 1e-6
    slow = (1 + (costs.warmup + 1) * calls) * us * costs.slow_factor * 1e-6
    return costs.overhead_s + costs.done_share * done + (1 - costs.done_share) * slow


def lead(configs: int, gpu_s: float, compile_s: float) -> int:
    """Configs that must be compiled before a unit starts for its GPU never to wait for the compile processes, the
    GPU taking a config every `gpu_s` and the processes finishing one every `compile_s`: config i (from 0) is ready
    (i + 1) x compile_s after the unit's first compile starts and wanted p x compile_s + i x gpu_s after it once
    the GPU starts at p compiled, so p >= n - (n - 1) x gpu_s / compile_s (at least one)."""
    if configs <= 0:
        return 0
    if gpu_s >= compile_s:
        return 1
    return min(configs, math.ceil(configs - (configs - 1) * gpu_s / compile_s))
