"""Running SGLang's own fused MoE tuner (sglang_tuner.TunerScript): a process per GPU, Ray served in-process, a
cold Triton cache, every config's start logged (ray_local.tqdm), the configs it picks read back.

- full: the script as its users run it (`--tune`), each process with its share of the batch sizes; the config
  file it writes is read back, its wall time measured.
- bounded: SGLang's own tuning loop (its worker's `tune`: its timing function, its error handling, its pick of the
  fastest) over a stated subset of its space per batch size (`sglang_tuner.subset`), stopped at a deadline inside
  the loop. Its full sweep's wall time is then an estimate: the mean measured cost of the randomly sampled
  configs times the size of its space, with a 95% interval from their spread (`TunerBatch.estimate`). Then, in the
  same process, the configs given to compare (SGLang's shipped pick, ours) and the tuner's best are timed by the
  script's own `benchmark_config` (its 100-iteration timing, rounds interleaved, the median kept): kernel time per
  batch size the script's way, for every dtype it tunes (fp8_w8a8 included).

`python -m astra_sglang.triton.moe.sglang_tuner_run REQUEST.json` is the bounded child (one per GPU).
"""
from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from astra_sglang.errors import AstraError
from astra_sglang.triton.moe.sglang_tuner import TunerScript, model_dir, shim_dir, subset
from astra_sglang.triton.moe.shapes import MoeShape


class TunerBatch(BaseModel):
    """SGLang's tuner at one batch size."""

    tokens: int
    mode: Literal["full", "bounded"]
    gpu: str = ""
    space: int = 0
    """Configs in SGLang's space (get_configs_compute_bound)."""
    given: int = 0
    """Configs its loop was given (the whole space, or the subset)."""
    ranked: int = 0
    """Of the subset, how many came first as ranked by us (the rest: a random sample)."""
    costs: list[float] = Field(default_factory=list)
    """Seconds its loop spent on each config it started, in order (compile, run, graph capture, timing)."""
    seconds: float = 0.0
    """Wall time of its loop at this batch size."""
    best: dict | None = None
    """The config it picked (SGLang's dict)."""
    reason: str = ""
    timed: dict[str, float] = Field(default_factory=dict)
    """Label ("pick", "tuner", "ours") -> microseconds by the script's benchmark_config (median of the rounds)."""
    timed_reason: str = ""

    def estimate(self) -> tuple[float, float] | None:
        """(seconds, 95% half-width) of a full sweep of the space at this batch size, from the sampled configs'
        costs (the ranked ones left out: they were not drawn at random)."""
        sample = self.costs[self.ranked:] if len(self.costs) > self.ranked + 1 else self.costs
        if self.mode == "full" or len(sample) < 2:
            return (self.seconds, 0.0) if self.mode == "full" else None
        mean, sd = statistics.fmean(sample), statistics.stdev(sample)
        return mean * self.space, 1.96 * sd / math.sqrt(len(sample)) * self.space


class TunerRun(BaseModel):
    files: dict[str, str]
    mode: Literal["full", "bounded"]
    batches: list[TunerBatch]
    wall_s: float
    gpus: list[str]
    sample: int = 0
    seed: int = 0


class BoundedRequest(BaseModel):
    """What one bounded child runs."""

    folder: str
    model: str
    shape: tuple[int, int, int, int]
    dtype: str
    quant: str = ""
    """"" or "fp8_w8a8" (the script's --dtype)."""
    tokens: list[int]
    ranked: dict[int, list[dict]] = Field(default_factory=dict)
    sample: int
    seed: int
    deadline: float
    """Epoch seconds: no config starts after it (each batch size gets an equal share of the time left)."""
    out: str
    """JSON-lines file: one TunerBatch per batch size."""
    compare: dict[int, dict[str, dict]] = Field(default_factory=dict)
    """Batch size -> label -> SGLang config dict, timed with the tuner's best after its loop."""
    rounds: int = 3


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


def _bind(method, values: dict, given: tuple[str, ...] = ("self",)) -> dict:
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
                times[label].append(float(benchmark_config(config, **_bind(benchmark_config, values, ("config",)))))
            except Exception as exc:  # noqa: BLE001 - the script's own loop skips a config that fails, so does this
                failed[label] = f"{label}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return {k: statistics.median(v) for k, v in times.items() if v}, "; ".join(failed.values())


def bounded_child(request: BoundedRequest) -> None:
    """In a child pinned to one GPU: SGLang's worker's `tune` over each batch size's subset."""
    import argparse
    import importlib.util

    import torch

    folder = Path(request.folder)
    sys.path[:0] = [str(shim_dir(Path(request.out).with_suffix(""))), str(folder)]  # a child's own: no write races
    spec = importlib.util.spec_from_file_location("tuning_fused_moe_triton", folder / "tuning_fused_moe_triton.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    import common_utils

    # The script's module-global `args` (its benchmark_config reads args.model), as its __main__ would parse it.
    script.args = argparse.Namespace(model=request.model, tp_size=1, ep_size=1, dtype=request.quant or "auto",
                                     seed=request.seed, per_channel_quant=False, disable_shared_experts_fusion=False,
                                     tune=True, batch_size=None, batch_sizes=request.tokens, search_space_file=None)
    # The script's own ServerArgs (it imports SGLang's), built as its main() builds it.
    worker = script.BenchmarkWorker.remote(request.seed, script.ServerArgs(model_path=request.model, tp_size=1,
                                                                           ep_size=1))
    tune = script.BenchmarkWorker.cls.tune
    space = common_utils.get_configs_compute_bound()
    experts, inter, hidden, topk = request.shape
    for i, tokens in enumerate(request.tokens):
        configs, ranked = subset(space, request.ranked.get(tokens, []), request.sample, request.seed + tokens)
        log = Path(request.out).with_suffix(f".{tokens}.log")
        # each batch size its share of the time, less what timing the compared configs takes after its loop
        share = (request.deadline - time.time()) / (len(request.tokens) - i)
        share -= min(COMPARE_S, share / 4)
        os.environ.update(ASTRA_RAY_LOG=str(log), ASTRA_RAY_DEADLINE=repr(time.time() + share))
        values = dict(num_tokens=tokens, num_experts=experts, shard_intermediate_size=2 * inter, hidden_size=hidden,
                      topk=topk, dtype=getattr(torch, request.dtype), use_fp8_w8a8=request.quant == "fp8_w8a8",
                      use_int8_w8a8=False, use_int8_w8a16=False, use_int4_w4a16=False, per_channel_quant=False,
                      block_shape=None, search_space=configs)
        started, best, reason = time.time(), None, ""
        try:
            best = worker.tune.remote(**_bind(tune, values)).value
        except AssertionError:  # its loop ended before any config finished (the deadline)
            reason = "no config finished before the deadline"
        seconds, loops = time.time() - started, costs_of(log)
        compare = {**request.compare.get(tokens, {}), **({"tuner": best} if best else {})}
        timed, timed_reason = time_configs(script.benchmark_config, values, compare, request.rounds)
        gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
        batch = TunerBatch(tokens=tokens, mode="bounded", gpu=gpu, space=len(space),
                           given=len(configs), ranked=ranked, costs=loops[-1] if loops else [],
                           seconds=seconds, best=best, reason=reason, timed=timed, timed_reason=timed_reason)
        with open(request.out, "a") as fh:
            fh.write(batch.model_dump_json() + "\n")


def _env(gpu: str, cache: Path, extra: dict | None = None) -> dict:
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=gpu, TRITON_CACHE_DIR=str(cache), **(extra or {}))
    return env


def _share(tokens: list[int], gpus: list[str]) -> dict[str, list[int]]:
    """Batch sizes dealt round-robin over the GPUs (as SGLang's script deals them over its Ray workers)."""
    plan: dict[str, list[int]] = {g: [] for g in gpus}
    for i, t in enumerate(tokens):
        plan[gpus[i % len(gpus)]].append(t)
    return {g: ts for g, ts in plan.items() if ts}


def run_bounded(script: TunerScript, shape: MoeShape, tokens: list[int], gpus: list[str], work: Path,
                ranked: dict[int, list[dict]], sample: int, seed: int, seconds: float,
                compare: dict[int, dict[str, dict]] | None = None) -> TunerRun:
    """SGLang's loop over each batch size's subset, a child per GPU, all stopped `seconds` from now; then the
    tuner's best and `compare`'s configs (batch size -> label -> config) timed by the script's benchmark_config."""
    work.mkdir(parents=True, exist_ok=True)
    model = model_dir(shape, work)
    deadline, started, children = time.time() + seconds, time.perf_counter(), []
    for gpu, share in _share(tokens, gpus).items():
        out = work / f"tuner-gpu{gpu}.jsonl"
        out.unlink(missing_ok=True)
        request = BoundedRequest(folder=str(script.folder), model=str(model), shape=(shape.experts, shape.inter,
                                 shape.hidden, shape.topk), dtype=shape.dtype, quant=shape.quant, tokens=share,
                                 ranked={t: ranked.get(t, []) for t in share}, sample=sample, seed=seed,
                                 deadline=deadline, out=str(out),
                                 compare={t: (compare or {}).get(t, {}) for t in share})
        path = work / f"tuner-gpu{gpu}.request.json"
        path.write_text(request.model_dump_json())
        cache = Path(tempfile.mkdtemp(prefix="triton-cold-", dir=work))  # a cold cache: compiles counted
        with open(work / f"tuner-gpu{gpu}.log", "w") as log:
            children.append((gpu, out, log.name, subprocess.Popen([sys.executable, "-m", __name__, str(path)],
                                                                  env=_env(gpu, cache), stdout=log, stderr=log)))
    batches = []
    for gpu, out, log, child in children:
        if child.wait() != 0:
            tail = (Path(log).read_text().strip().splitlines() or ["no output"])[-1]
            raise AstraError(f"SGLang's tuner loop failed on GPU {gpu} (exit {child.returncode}): {tail}")
        batches += [TunerBatch.model_validate_json(line) for line in out.read_text().splitlines()]
    return TunerRun(files=script.hashes, mode="bounded", batches=sorted(batches, key=lambda b: b.tokens),
                    wall_s=time.perf_counter() - started, gpus=gpus, sample=sample, seed=seed)


def run_full(script: TunerScript, shape: MoeShape, tokens: list[int], gpus: list[str], work: Path) -> TunerRun:
    """The script as its users run it (`--tune`), a process per GPU with its share of the batch sizes."""
    work.mkdir(parents=True, exist_ok=True)
    model, shim, started = model_dir(shape, work), shim_dir(work), time.perf_counter()
    children = []
    for gpu, share in _share(tokens, gpus).items():
        cwd = work / f"full-gpu{gpu}"
        cwd.mkdir(exist_ok=True)
        runs = [["--batch-sizes", *map(str, share)]] if script.batch_sizes_flag else [["--batch-size", str(t)]
                                                                                      for t in share]
        dtype = ["--dtype", shape.quant] if shape.quant else []
        command = " && ".join(" ".join([sys.executable, str(script.script), "--model", str(model), "--tp-size", "1",
                                        *dtype, "--tune", *r]) for r in runs)
        log = cwd / "ray.log"
        env = _env(gpu, Path(tempfile.mkdtemp(prefix="triton-cold-", dir=work)),
                   {"PYTHONPATH": os.pathsep.join(filter(None, [str(shim), os.environ.get("PYTHONPATH")])),
                    "ASTRA_RAY_LOG": str(log)})
        children.append((gpu, share, cwd, log, subprocess.Popen(command, shell=True, cwd=cwd, env=env)))
    batches = []
    for gpu, share, cwd, log, child in children:
        if child.wait() != 0:
            raise AstraError(f"SGLang's tuner failed on GPU {gpu} (exit {child.returncode}): see {cwd}")
        written = {}
        for path in sorted(cwd.glob("E=*.json")):
            written.update({int(k): v for k, v in json.loads(path.read_text()).items()})
        for t, costs in zip(share, costs_of(log)):
            batches.append(TunerBatch(tokens=t, mode="full", space=len(costs), given=len(costs), costs=costs,
                                      seconds=sum(costs), best=written.get(t)))
    return TunerRun(files=script.hashes, mode="full", batches=sorted(batches, key=lambda b: b.tokens),
                    wall_s=time.perf_counter() - started, gpus=gpus)


if __name__ == "__main__":
    bounded_child(BoundedRequest.model_validate_json(Path(sys.argv[1]).read_text()))
