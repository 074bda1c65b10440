"""The child process of SGLang's fused MoE tuner runs (sglang_tuner_run, sglang_tuner_exhaustive), one per GPU or
per warm shard: it loads the script from its folder as its `__main__` would (Ray served in-process, the
module-global `args` set), builds its BenchmarkWorker and calls the worker's own `tune` over the configs its
request names, per batch size, on the Triton cache its environment names.

- bounded: our ranked configs then a seeded random sample of the space (sglang_tuner.subset), each batch size its
  share of the time to the deadline; then the compared configs timed by the script's `benchmark_config`.
- warm: a shard of the space (every `count`-th config from `index`), every batch size, each its share of the time
  to the deadline; timings discarded: the run fills the shared Triton cache with exactly the kernels the timing
  child will look up (same script, same arguments, so the same specializations; num_tokens changes two of the
  kernel's int arguments, so each batch size is warmed).
- timing: the whole space (filtered as the script's main filters it) per batch size, on the warmed cache.

bounded and timing: what the script's loop measured for every config it started (its time, or why it failed: the
configs it skipped) is recorded by wrapping its `benchmark_config` (`Observed`), which re-raises a failure to the
loop unchanged.

`python -m astra_sglang.triton.moe.sglang_tuner_child REQUEST.json` runs one.
"""
from __future__ import annotations

import json
import os
import random
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from astra_sglang.errors import AstraError, describe
from astra_sglang.triton.moe.sglang_tuner import script_values, shim_dir, subset
from astra_sglang.triton.moe.sglang_tuner_records import TunerBatch
from astra_sglang.triton.moe.shapes import MoeShape
from astra_sglang.triton.moe.space import MoeConfig


class ChildRequest(BaseModel):
    """What one child runs."""

    role: Literal["bounded", "warm", "timing"] = "bounded"
    folder: str
    model: str
    shape: tuple[int, int, int, int]
    dtype: str
    quant: str = ""
    """"" or "fp8_w8a8" (the script's --dtype)."""
    tokens: list[int]
    ranked: dict[int, list[dict]] = Field(default_factory=dict)
    sample: int = 0
    seed: int = 0
    shard: tuple[int, int] = (0, 1)
    """warm: (index, count): this child warms shard `index` of `count` (shard_of)."""
    deadline: float
    """Epoch seconds: no config starts after it (each batch size gets an equal share of the time left: share_of)."""
    out: str
    """JSON-lines file: one record per batch size (TunerBatch, or WarmShard for a warm child)."""
    compare: dict[int, dict[str, dict]] = Field(default_factory=dict)
    """Batch size -> label -> SGLang config dict, timed with the tuner's best after its loop."""
    rounds: int = 3
    warm_s: dict[int, float] = Field(default_factory=dict)
    """timing: batch size -> seconds its warm phase took (copied into its record)."""


class WarmShard(BaseModel):
    """One warm child's pass over its shard at one batch size."""

    tokens: int
    shard: tuple[int, int]
    given: int
    """Configs of the shard."""
    started: int
    """Configs its loop started before the deadline."""
    begin: float
    end: float
    """Epoch seconds of the pass."""


REASON_CHARS = 200
"""A failure's first line is kept up to this (Triton's shared-memory message is ~140 characters)."""
COMPARE_S = 12.0
"""Seconds kept per batch size (at most a quarter of its share), after its loop, for timing the compared configs
(compiled already by the loop or a warm cache: a few 100-iteration runs each)."""


def costs_of(log: Path) -> list[list[float]]:
    """Per tqdm loop of the log (ray_local.tqdm's lines), the seconds each config took."""
    loops, starts = [], []
    if not log.is_file():
        return loops
    for line in log.read_text().splitlines():
        event = json.loads(line)
        if "end" in event:
            stamps = starts + [event["end"]]
            loops.append([b - a for a, b in zip(stamps, stamps[1:])])
            starts = []
        else:
            starts.append(event["t"])
    return loops


def bind(method, values: dict, given: tuple[str, ...] = ("self",)) -> dict:
    """The keyword arguments of SGLang's `tune` (or `benchmark_config`) by its parameter names, less those `given`
    otherwise (AstraError naming one it requires that the runner does not know)."""
    import inspect

    params = [p for p in inspect.signature(method).parameters.values() if p.name not in given
              and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    unknown = [p.name for p in params if p.name not in values and p.default is inspect.Parameter.empty]
    if unknown:
        raise AstraError(f"SGLang's tuner's {method.__name__}() takes {', '.join(unknown)}, which this runner does "
                         "not know")
    return {p.name: values[p.name] for p in params if p.name in values}


def time_configs(benchmark_config, values: dict, configs: dict[str, dict], rounds: int) -> tuple[dict, str]:
    """(label -> median microseconds, what failed) of each config by the script's `benchmark_config` (its default
    iteration count), the rounds interleaved so that a drift of the GPU's clock reaches every config alike."""
    times: dict[str, list[float]] = {label: [] for label in configs}
    failed = {}
    for _ in range(rounds):
        for label, config in configs.items():
            if label in failed:
                continue
            try:
                times[label].append(float(benchmark_config(config, **bind(benchmark_config, values, ("config",)))))
            except Exception as exc:  # noqa: BLE001 - the script's own loop skips a config that fails, so does this
                failed[label] = f"{label}: {describe(exc)}"
    return {k: statistics.median(v) for k, v in times.items() if v}, "; ".join(failed.values())


class Observed:
    """Wraps the script's module-level `benchmark_config` (its loop calls it by that global name) and observes every
    call: the microseconds it returned, or the first line of what it raised, by config code; an exception is
    re-raised unchanged, so the script's loop still decides what it skips. `take` hands one batch size's record
    over and starts the next."""

    def __init__(self, script):
        self.inner, self.landscape, self.failed = script.benchmark_config, {}, {}
        script.benchmark_config = self

    def __call__(self, config, *args, **kwargs):
        code = MoeConfig.from_sglang(config).code()
        try:
            result = self.inner(config, *args, **kwargs)
        except Exception as exc:
            self.failed[code] = describe(exc)[:REASON_CHARS]
            raise
        self.landscape[code] = float(result)
        return result

    def take(self) -> tuple[dict[str, float], dict[str, str]]:
        """(code -> microseconds, code -> why it failed) of the calls since the last take."""
        taken = self.landscape, self.failed
        self.landscape, self.failed = {}, {}
        return taken


def load(request: ChildRequest):
    """(the script's module, its common_utils, a BenchmarkWorker) as the script's main would build them."""
    import argparse
    import importlib.util

    folder = Path(request.folder)
    sys.path[:0] = [str(shim_dir(Path(request.out).with_suffix(""))), str(folder)]  # a child's own: no write races
    spec = importlib.util.spec_from_file_location("tuning_fused_moe_triton", folder / "tuning_fused_moe_triton.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    import common_utils

    # The script's module-global `args` (its benchmark_config reads args.model), as its __main__ would parse it.
    script.args = argparse.Namespace(model=request.model, tp_size=1, ep_size=1, dtype=shape_of(request).script_dtype,
                                     seed=request.seed, per_channel_quant=False, disable_shared_experts_fusion=False,
                                     tune=True, batch_size=None, batch_sizes=request.tokens, search_space_file=None)
    # The script's own ServerArgs (it imports SGLang's), built as its main() builds it.
    worker = script.BenchmarkWorker.remote(request.seed, script.ServerArgs(model_path=request.model, tp_size=1,
                                                                           ep_size=1))
    return script, common_utils, worker


def script_space(common_utils, block_shape: list[int] | None = None) -> list[dict]:
    """SGLang's space as its main() builds it for --tune: get_configs_compute_bound(), less the configs whose
    BLOCK_SIZE_K does not divide a block-quantized shape's block_k (the script's own filter, inline in its main)."""
    space = common_utils.get_configs_compute_bound()
    return [c for c in space if block_shape[1] % c["BLOCK_SIZE_K"] == 0] if block_shape else space


def shard_of(space: list[dict], index: int, count: int) -> list[dict]:
    """Warm shard `index` of `count`: every config in exactly one shard, dealt round-robin over a fixed shuffle of
    the space, since in its own order a stride of 8 or 32 configs keeps BLOCK_SIZE_N, warps and group size fixed
    per shard, and compile time grows with the tile: some shards would take far longer than others."""
    order = list(range(len(space)))
    random.Random(0).shuffle(order)
    return [space[j] for j in sorted(order[index::count])]


def shape_of(request: ChildRequest) -> MoeShape:
    return MoeShape(*request.shape, dtype=request.dtype, quant=request.quant)


def values_of(request: ChildRequest, tokens: int, configs: list[dict]) -> dict:
    """The arguments of the script's tune and benchmark_config, by name."""
    import torch

    return script_values(shape_of(request), tokens, configs, getattr(torch, request.dtype))


def share_of(request: ChildRequest, i: int) -> float:
    """Seconds for the request's i-th batch size: the time to its deadline over the batch sizes left, this one
    included. A child runs them one after another, so time one leaves goes to those after it, and one that runs
    long (more compiles, larger launches) cannot take the others' time."""
    return (request.deadline - time.time()) / (len(request.tokens) - i)


def tune(worker, script, values: dict, log: Path, deadline: float) -> tuple[dict | None, str, float, list[float]]:
    """(its pick, why none, the loop's wall seconds, per-config costs) of the worker's own `tune`, stopped at
    `deadline` inside its loop."""
    os.environ.update(ASTRA_RAY_LOG=str(log), ASTRA_RAY_DEADLINE=repr(deadline))
    started, best, reason = time.time(), None, ""
    try:
        best = worker.tune.remote(**bind(script.BenchmarkWorker.cls.tune, values)).value
    except AssertionError:  # its loop ended with no config measured (the deadline, or every config skipped)
        reason = "no config finished before the deadline" if time.time() >= deadline else "every config was skipped"
    loops = costs_of(log)
    return best, reason, time.time() - started, loops[-1] if loops else []


def child(request: ChildRequest) -> None:
    import torch

    script, common_utils, worker = load(request)
    observed = Observed(script) if request.role != "warm" else None
    space = script_space(common_utils)
    for i, tokens in enumerate(request.tokens):
        log = Path(request.out).with_suffix(f".{tokens}.log")
        if request.role == "warm":
            configs = shard_of(space, *request.shard)
            begin = time.time()
            _, _, _, costs = tune(worker, script, values_of(request, tokens, configs), log,
                                  begin + share_of(request, i))
            record = WarmShard(tokens=tokens, shard=request.shard, given=len(configs), started=len(costs),
                               begin=begin, end=time.time())
        else:
            configs, ranked = (space, 0) if request.role == "timing" else \
                subset(space, request.ranked.get(tokens, []), request.sample, request.seed + tokens)
            # each batch size its share of the time, less what timing the compared configs takes after its loop
            share = share_of(request, i)
            share -= min(COMPARE_S, share / 4) if request.rounds else 0.0
            values = values_of(request, tokens, configs)
            best, reason, seconds, costs = tune(worker, script, values, log, time.time() + share)
            landscape, failed = observed.take()
            compare = {**request.compare.get(tokens, {}), **({"tuner": best} if best else {})}
            # the compared configs are timed past the wrapper: the landscape is the loop's alone
            timed, timed_reason = time_configs(observed.inner, values, compare, request.rounds)
            record = TunerBatch(tokens=tokens, mode="exhaustive" if request.role == "timing" else "bounded",
                                gpu=torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
                                space=len(space), given=len(configs), ranked=ranked, costs=costs, seconds=seconds,
                                best=best, reason=reason, timed=timed, timed_reason=timed_reason,
                                skipped=len(failed), skip_reasons=dict(Counter(r[:120] for r in failed.values())),
                                landscape=landscape, failed=failed, warm_s=request.warm_s.get(tokens, 0.0))
        with open(request.out, "a") as fh:
            fh.write(record.model_dump_json() + "\n")


if __name__ == "__main__":
    child(ChildRequest.model_validate_json(Path(sys.argv[1]).read_text()))
