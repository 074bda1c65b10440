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

- exhaustive: its whole space, compiling apart from timing (sglang_tuner_exhaustive).

The bounded child (one per GPU) is sglang_tuner_child's.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from astra_sglang.errors import AstraError
from astra_sglang.triton.moe.sglang_tuner import TunerScript, model_dir, shim_dir
from astra_sglang.triton.moe.sglang_tuner_child import ChildRequest, costs_of
from astra_sglang.triton.moe.sglang_tuner_records import TunerBatch, TunerRun
from astra_sglang.triton.moe.shapes import MoeShape


def env_for(gpu: str, cache: Path, extra: dict | None = None) -> dict:
    return dict(os.environ, CUDA_VISIBLE_DEVICES=gpu, TRITON_CACHE_DIR=str(cache), **(extra or {}))


def share(tokens: list[int], gpus: list[str]) -> dict[str, list[int]]:
    """Batch sizes dealt round-robin over the GPUs (as SGLang's script deals them over its Ray workers)."""
    plan: dict[str, list[int]] = {g: [] for g in gpus}
    for i, t in enumerate(tokens):
        plan[gpus[i % len(gpus)]].append(t)
    return {g: ts for g, ts in plan.items() if ts}


def request_for(shape: MoeShape, script: TunerScript, model: Path, **fields) -> ChildRequest:
    return ChildRequest(folder=str(script.folder), model=str(model), dtype=shape.dtype, quant=shape.quant,
                        shape=(shape.experts, shape.inter, shape.hidden, shape.topk), **fields)


def spawn(request: ChildRequest, name: str, gpu: str, cache: Path, work: Path, extra: dict | None = None):
    """(log path, process) of a child running `request`, pinned to `gpu`, on the Triton cache `cache`."""
    Path(request.out).unlink(missing_ok=True)
    path = work / f"{name}.request.json"
    path.write_text(request.model_dump_json())
    with open(work / f"{name}.log", "w") as log:
        process = subprocess.Popen([sys.executable, "-m", "astra_sglang.triton.moe.sglang_tuner_child", str(path)],
                                   env=env_for(gpu, cache, extra), stdout=log, stderr=log)
    return work / f"{name}.log", process


def collect(children, what: str, record=TunerBatch) -> list:
    """The records the children wrote, once all have ended (AstraError naming the first that failed: its GPU, exit
    code and last line)."""
    codes = [(gpu, log, process.wait()) for gpu, out, log, process in children]
    for gpu, log, code in codes:
        if code != 0:
            tail = (Path(log).read_text().strip().splitlines() or ["no output"])[-1]
            raise AstraError(f"SGLang's tuner {what} failed on GPU {gpu} (exit {code}): {tail}")
    return [record.model_validate_json(line) for _, out, _, _ in children if out.is_file()
            for line in out.read_text().splitlines()]


def run_bounded(script: TunerScript, shape: MoeShape, tokens: list[int], gpus: list[str], work: Path,
                ranked: dict[int, list[dict]], sample: int, seed: int, seconds: float,
                compare: dict[int, dict[str, dict]] | None = None, rounds: int = 3,
                cache_root: Path | None = None) -> TunerRun:
    """SGLang's loop over each batch size's subset, a child per GPU, all stopped `seconds` from now; then the
    tuner's best and `compare`'s configs (batch size -> label -> config) timed by the script's benchmark_config
    over `rounds` rounds (0: none). Each child's cold Triton cache is a fresh folder under `cache_root` (default
    `work`)."""
    work.mkdir(parents=True, exist_ok=True)
    model = model_dir(shape, work)
    deadline, started, children = time.time() + seconds, time.perf_counter(), []
    for gpu, mine in share(tokens, gpus).items():
        out = work / f"tuner-gpu{gpu}.jsonl"
        request = request_for(shape, script, model, tokens=mine, ranked={t: ranked.get(t, []) for t in mine},
                              sample=sample, seed=seed, deadline=deadline, out=str(out),
                              compare={t: (compare or {}).get(t, {}) for t in mine}, rounds=rounds)
        (cache_root or work).mkdir(parents=True, exist_ok=True)
        cache = Path(tempfile.mkdtemp(prefix="triton-cold-", dir=cache_root or work))  # a cold cache: compiles counted
        children.append((gpu, out, *spawn(request, f"tuner-gpu{gpu}", gpu, cache, work)))
    batches = collect(children, "loop")
    return TunerRun(files=script.hashes, mode="bounded", batches=sorted(batches, key=lambda b: b.tokens),
                    wall_s=time.perf_counter() - started, gpus=gpus, sample=sample, seed=seed)


def run_full(script: TunerScript, shape: MoeShape, tokens: list[int], gpus: list[str], work: Path,
             cache_root: Path | None = None) -> TunerRun:
    """The script as its users run it (`--tune`), a process per GPU with its share of the batch sizes, each on a
    fresh Triton cache under `cache_root` (default `work`)."""
    work.mkdir(parents=True, exist_ok=True)
    (cache_root or work).mkdir(parents=True, exist_ok=True)
    model, shim, started = model_dir(shape, work), shim_dir(work), time.perf_counter()
    children = []
    for gpu, mine in share(tokens, gpus).items():
        cwd = work / f"full-gpu{gpu}"
        cwd.mkdir(exist_ok=True)
        runs = [["--batch-sizes", *map(str, mine)]] if script.batch_sizes_flag else [["--batch-size", str(t)]
                                                                                     for t in mine]
        dtype = ["--dtype", shape.script_dtype] if shape.quantized else []  # unquantized: the script's default
        command = " && ".join(" ".join([sys.executable, str(script.script), "--model", str(model), "--tp-size", "1",
                                        *dtype, "--tune", *r]) for r in runs)
        log = cwd / "ray.log"
        env = env_for(gpu, Path(tempfile.mkdtemp(prefix="triton-cold-", dir=cache_root or work)),
                      {"PYTHONPATH": os.pathsep.join(filter(None, [str(shim), os.environ.get("PYTHONPATH")])),
                       "ASTRA_RAY_LOG": str(log)})
        children.append((gpu, mine, cwd, log, subprocess.Popen(command, shell=True, cwd=cwd, env=env)))
    batches = []
    for gpu, mine, cwd, log, child in children:
        if child.wait() != 0:
            raise AstraError(f"SGLang's tuner failed on GPU {gpu} (exit {child.returncode}): see {cwd}")
        written = {}
        for path in sorted(cwd.glob("E=*.json")):
            written.update({int(k): v for k, v in json.loads(path.read_text()).items()})
        for t, costs in zip(mine, costs_of(log)):
            batches.append(TunerBatch(tokens=t, mode="full", space=len(costs), given=len(costs), costs=costs,
                                      seconds=sum(costs), best=written.get(t)))
    return TunerRun(files=script.hashes, mode="full", batches=sorted(batches, key=lambda b: b.tokens),
                    wall_s=time.perf_counter() - started, gpus=gpus)

