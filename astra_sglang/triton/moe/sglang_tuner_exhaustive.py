"""SGLang's fused MoE tuner over its whole space inside one GPU command, its exact answer: compiling is done apart
from timing, both by the script's own code (sglang_tuner_child), on one fresh Triton cache shared by every process.

1. cold sample (optional): its loop over a few configs drawn at random per batch size, a child per GPU on its own
   empty cache, nothing else running: the per-config cost its users pay, from which their full sweep's wall is
   estimated (TunerBatch.estimate, TunerRun.users_wall). Every GPU samples: with fewer batch sizes than GPUs the
   spare ones draw more configs of the same batch sizes. Not part of this run's own wall. Alone (run_cold): the
   users' wall of a shape whose best an earlier run has.
2. warm: `warm_procs` children per GPU, each running the script's worker's `tune` over its shard of the space
   (every `count`-th config) at every batch size, timings discarded: Triton compiles on every core into the shared
   cache, exactly the kernels (specializations included: num_tokens changes two int arguments) the timing phase
   looks up. Each child gives each batch size an equal share of the phase's time left (one that compiles slowly
   cannot starve the rest) and stops its loop there; what it started per batch size is recorded.
3. timing: a child per GPU, alone on it, running the worker's `tune` over the whole space (a config that failed in
   the warm phase included: the script's loop skips it itself) for its round-robin share of the batch sizes, on the
   warm cache; its pick is SGLang's tuner's best over its space, timed its way. A deadline stops its loop inside
   (TunerBatch.covered says how many configs it reached); then SGLang's pick, its best and ours are timed by the
   script's benchmark_config.
"""
from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from astra_sglang.triton.cost import expert_elements
from astra_sglang.triton.moe.sglang_tuner import TunerScript, model_dir
from astra_sglang.triton.moe.sglang_tuner_child import WarmShard
from astra_sglang.triton.moe.sglang_tuner_records import TunerBatch, TunerRun
from astra_sglang.triton.moe.sglang_tuner_run import collect, request_for, share, spawn
from astra_sglang.triton.moe.shapes import MoeShape

FP16_BYTES = 2
PROC_OVERHEAD_B = 1.5 * 2 ** 30
"""Bytes a warm child holds besides the weights: CUDA context, the script's 256 MB L2 flush buffer, activations,
the CUDA graph's pool."""


def default_warm_procs(shape: MoeShape, gpus: list[str]) -> int:
    """Warm children per GPU: the host's cores shared out over its GPUs (Triton compiles on one core per process),
    fewer where each child's tensors (the script builds both weight tensors per config) would not fit in 85% of a
    GPU's memory."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    procs = max(1, cores // max(1, len(gpus)))
    try:
        import torch

        if torch.cuda.is_available():
            # bytes an element takes while the script builds the weights: quantized ones are drawn in fp16, then
            # cast (both held a moment)
            width = shape.weight_bytes + (FP16_BYTES if shape.quantized else 0)
            weights = shape.experts * expert_elements(shape.inter, shape.hidden) * width
            procs = min(procs, max(1, int(0.85 * torch.cuda.get_device_properties(0).total_memory //
                                          (weights + PROC_OVERHEAD_B))))
    except ImportError:
        pass
    return procs


def warm(script: TunerScript, shape: MoeShape, tokens: list[int], gpus: list[str], work: Path, model: Path,
         cache: Path, procs: int, deadline: float) -> list[WarmShard]:
    """The warm phase: `procs` children per GPU, shard i of procs * GPUs on GPU i mod GPUs, every batch size."""
    count, children = procs * len(gpus), []
    for i in range(count):
        gpu, out = gpus[i % len(gpus)], work / f"warm-{i}.jsonl"
        request = request_for(shape, script, model, role="warm", tokens=tokens, shard=(i, count),
                              deadline=deadline, out=str(out), rounds=0)
        # one core each: torch's own thread pool would only compete with the other children's compiles
        children.append((gpu, out, *spawn(request, f"warm-{i}", gpu, cache, work, {"OMP_NUM_THREADS": "1"})))
    return collect(children, "warm phase", WarmShard)


def sample_cold(script: TunerScript, shape: MoeShape, tokens: list[int], gpus: list[str], work: Path, model: Path,
                count: int, seed: int, seconds: float, cache_root: Path
                ) -> tuple[dict[int, list[float]], float, dict[int, int]]:
    """(batch size -> per-config costs, wall, batch size -> its space's size) of the script's loop over `count`
    configs drawn at random per batch size and child, a child per GPU on its own cold cache, all stopped `seconds`
    from now. The batch sizes are dealt round-robin; a GPU left without one (fewer batch sizes than GPUs) draws
    another sample of one (its own seed), so that every GPU samples. A child's first config also carries its
    process's one-time costs, which the users' estimate counts once (TunerBatch.estimate): the first child's is kept
    first, the others' are dropped."""
    work.mkdir(parents=True, exist_ok=True)
    dealt = share(tokens, gpus)
    deadline, started, children = time.time() + seconds, time.perf_counter(), []
    for i, gpu in enumerate(gpus):
        mine = dealt.get(gpu) or [tokens[i % len(tokens)]]  # a spare GPU: a batch size again, its own draw
        out = work / f"cold-gpu{gpu}.jsonl"
        request = request_for(shape, script, model, tokens=mine, ranked={t: [] for t in mine}, sample=count,
                              seed=seed + 7919 * (i // len(tokens)), deadline=deadline, out=str(out),
                              compare={t: {} for t in mine}, rounds=0)
        cache = Path(tempfile.mkdtemp(prefix="triton-cold-", dir=cache_root))  # a cold cache: compiles counted
        children.append((gpu, out, *spawn(request, f"cold-gpu{gpu}", gpu, cache, work)))
    cold: dict[int, list[float]] = {}
    spaces: dict[int, int] = {}
    for batch in collect(children, "cold sample"):  # in the children's order: the first child's first
        cold[batch.tokens] = cold[batch.tokens] + batch.costs[1:] if batch.tokens in cold else list(batch.costs)
        spaces[batch.tokens] = batch.space
    return cold, time.perf_counter() - started, spaces


def _folders(work: Path, cache_root: Path | None) -> Path:
    """Makes `work` and the Triton caches' root (default `work`); returns that root."""
    work.mkdir(parents=True, exist_ok=True)
    root = cache_root or work
    root.mkdir(parents=True, exist_ok=True)
    return root


def run_cold(script: TunerScript, shape: MoeShape, tokens: list[int], gpus: list[str], work: Path, count: int,
             seed: int, seconds: float, cache_root: Path | None = None) -> TunerRun:
    """The cold sample alone (mode "cold"): its users' wall at each batch size, for a shape whose best an earlier
    exhaustive run already has (earlier_runs joins the two). `count` configs per batch size and GPU, at most
    `seconds`; no warm phase, no timing phase, no best."""
    cache_root = _folders(work, cache_root)
    cold, cold_s, spaces = sample_cold(script, shape, tokens, gpus, work / "cold", model_dir(shape, work), count,
                                       seed, seconds, cache_root)
    batches = [TunerBatch(tokens=t, mode="cold", space=spaces[t], cold_costs=cold[t]) for t in tokens if t in cold]
    return TunerRun(files=script.hashes, mode="cold", batches=batches, wall_s=0.0, gpus=gpus, sample=count, seed=seed,
                    cold_s=cold_s)


def run_exhaustive(script: TunerScript, shape: MoeShape, tokens: list[int], gpus: list[str], work: Path,
                   seconds: float, warm_procs: int, warm_share: float = 0.5, cold_sample: int = 8,
                   cold_seconds: float = 30.0, seed: int = 0, compare: dict[int, dict[str, dict]] | None = None,
                   cache_root: Path | None = None) -> TunerRun:
    """SGLang's tuner over its whole space at each batch size, everything inside `seconds` from now: the cold
    sample (`cold_sample` configs per batch size, at most `cold_seconds`; 0: none, and no users' estimate), the
    warm phase (at most `warm_share` of the time then left), the timing phase (the rest). Triton caches go under
    `cache_root` (default `work`): thousands of compiled kernels, kept out of the results."""
    cache_root = _folders(work, cache_root)
    model, end = model_dir(shape, work), time.time() + seconds
    cold, cold_s, _ = sample_cold(script, shape, tokens, gpus, work / "cold", model, cold_sample, seed, cold_seconds,
                                  cache_root) if cold_sample else ({}, 0.0, {})
    cache = Path(tempfile.mkdtemp(prefix="triton-warm-", dir=cache_root))  # one fresh cache, every process of the host
    begin = time.time()
    shards = warm(script, shape, tokens, gpus, work, model, cache, warm_procs, begin + warm_share * (end - begin))
    warm_s = time.time() - begin
    per_batch = {t: [s for s in shards if s.tokens == t] for t in tokens}
    warm_of = {t: max(s.end for s in ss) - min(s.begin for s in ss) if ss else 0.0 for t, ss in per_batch.items()}
    begin, children = time.time(), []
    for gpu, mine in share(tokens, gpus).items():
        out = work / f"timing-gpu{gpu}.jsonl"
        request = request_for(shape, script, model, role="timing", tokens=mine, seed=seed, deadline=end,
                              out=str(out), compare={t: (compare or {}).get(t, {}) for t in mine},
                              warm_s={t: warm_of[t] for t in mine})
        children.append((gpu, out, *spawn(request, f"timing-gpu{gpu}", gpu, cache, work)))
    batches: list[TunerBatch] = collect(children, "timing phase")
    timing_s = time.time() - begin
    for batch in batches:
        batch.warmed = sum(s.started for s in per_batch[batch.tokens])
        batch.cold_costs = cold.get(batch.tokens, [])
    return TunerRun(files=script.hashes, mode="exhaustive", batches=sorted(batches, key=lambda b: b.tokens),
                    wall_s=warm_s + timing_s, gpus=gpus, sample=cold_sample, seed=seed, warm_s=warm_s,
                    timing_s=timing_s, cold_s=cold_s, warm_procs=warm_procs)
