"""Fused MoE's screening tier at speed, and the two tiers against SGLang's shipped pick, in one GPU command.

Per shape (qwen3: Qwen3-30B-A3B's 128x768x2048 top-8; mixtral: Mixtral's 8x14336x4096 top-2; bf16), at one batch
size (--batch, 64), each phase a new ScreenPool (new worker processes):
  cold    one GPU, the Triton cache as the bench found it (empty at the first shape): SGLang's whole tuning space
          (1,920 configs; those that cannot fit in shared memory dropped unbuilt) in screening order, Triton
          compiling on every other CPU core ahead of the GPU
  warm1   one GPU, every kernel in the cache: the first --warm configs of the order (load and time only)
  warm2   two GPUs, the same configs: the speedup is warm1's wall over warm2's
  tiers   `tune fused_moe`'s path: the screening tier (--screen-budget seconds over --buckets) and --finalists per
          batch size through the isolated evaluator against SGLang's pick; per batch size, what was written
Per screening phase: configs/s per GPU, wall, compile-ahead hit rate (compiles the worker found in the cache),
compile jobs and their CPU seconds, the best config, its position in the order and when it was found, SGLang's
pick's screened time. No phase starts work past --deadline (seconds from the start); a phase cut short says how
much it screened. Rows go to OUT/moe_screen.jsonl as they finish; OUT/moe_screen.md is the summary.

Usage (GPU machine, through benchmarks/gpu/moe_screen.sh): python3 benchmarks/moe_screen_bench.py --out DIR
      python3 benchmarks/moe_screen_bench.py --out DIR --simulate   # CPU: simulated GPUs (the cost model's times)
      python3 benchmarks/moe_screen_bench.py --out DIR --table      # the summary of an earlier DIR/moe_screen.jsonl
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from moe_screen_table import render
from pydantic import BaseModel

from astra_sglang.optimize.tuner.moe_order import gpu_model, ordered
from astra_sglang.optimize.tuner.moe_simulate import SimulatedEvaluator, landscape_us
from astra_sglang.optimize.tuner.moe_two_tier import LAUNCH, ScreenOptions
from astra_sglang.optimize.tuner.screen_pool import ScreenPool
from astra_sglang.optimize.tuner.screen_worker_handle import WorkerSettings
from astra_sglang.triton.moe import configs as moe_configs
from astra_sglang.triton.moe.shapes import MoeShape

SHAPES = {"qwen3": MoeShape(128, 768, 2048, 8), "mixtral": MoeShape(8, 14336, 4096, 2)}
SIMULATED_GPU = "NVIDIA H100 80GB HBM3"
SIMULATE = "astra_sglang.optimize.tuner.screen_simulate:SimulatedLaunch"
TIERS_MIN_S = 150
"""Time the tiers phase needs at least (screening, one round of strict evaluations in parallel, the final one)."""


class Row(BaseModel):
    kind: str = "phase"
    shape: str
    phase: str
    gpus: int
    bucket: int
    configs: int
    screened: int
    ok: int
    wall_s: float
    start_s: float
    """Starting the workers (importing SGLang), before the wall clock."""
    per_gpu: float
    steady_per_gpu: float | None
    """From the first result on: the workers' preparing of the batch size left out."""
    first_at_s: float | None
    hit_rate: float | None
    compile_jobs: int
    compile_cached: int
    compile_s: float
    restarts: int
    failed: dict[str, int]
    best: str | None
    best_us: float | None
    best_index: int | None
    best_at_s: float | None
    pick: str
    pick_us: float | None
    dropped: int
    """Configs of SGLang's space not screened: they cannot fit in shared memory (or the cost model's cut)."""


class TierRow(BaseModel):
    kind: str = "tier"
    shape: str
    tokens: int
    pick: str
    pick_source: str
    screened: int
    screen_best: str | None
    screen_ratio: float | None
    """SGLang's pick's screened time over the best screened time."""
    chosen: str
    verdict: str
    final_speedup: float | None
    """The written config against SGLang's pick in the final isolated evaluation."""


class Bench:
    def __init__(self, args):
        self.args, self.out = args, Path(args.out)
        self.deadline = time.time() + args.deadline
        self.cache = Path(args.work) / "triton-cache"
        if args.simulate:
            self.gpu, self.smem, self.gpus = SIMULATED_GPU, 227 * 1024, ["0", "1"]
            lookup = moe_configs.sglang_module()
            lookup.get_device_name = lambda: SIMULATED_GPU  # SGLang's lookup on the simulated GPU
        else:
            from astra_sglang.optimize.pool.devices import visible_gpus
            from astra_sglang.optimize.tuner.moe_run import facts_here

            facts = facts_here()
            self.gpu, self.smem, self.gpus = facts.gpu, facts.smem, visible_gpus()
        self.cores = max(1, (os.cpu_count() or 2) - len(self.gpus))

    def log(self, text: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)

    def emit(self, row: BaseModel) -> None:
        with (self.out / "moe_screen.jsonl").open("a") as fh:
            fh.write(row.model_dump_json() + "\n")

    def settings(self, shape: MoeShape) -> WorkerSettings:
        if self.args.simulate:
            args = dict(experts=shape.experts, inter=shape.inter, hidden=shape.hidden, topk=shape.topk, gpu=self.gpu)
            options = {"landscape": f"{landscape_us.__module__}:landscape_us", "landscape_args": args,
                       "compile_s": self.args.sim_compile_s, "call_s": self.args.sim_call_s}
            return WorkerSettings(target=SIMULATE, options=options, beat_s=0.2)
        return WorkerSettings(target=LAUNCH, options={"experts": shape.experts, "inter": shape.inter,
                                                      "hidden": shape.hidden, "topk": shape.topk})

    def screen(self, name: str, phase: str, shape: MoeShape, gpus: list[str], limit: int | None) -> Row | None:
        if time.time() >= self.deadline:
            self.log(f"{name} {phase}: skipped, past the deadline")
            return None
        pick = moe_configs.sglang_picks(shape.experts, shape.inter, shape.hidden, shape.topk, [self.args.batch])[0]
        order = ordered(shape, self.args.batch, pick.config, gpu_model(self.gpu, self.smem), prune=None)
        configs = order.codes[:limit] if limit else order.codes
        began = time.time()
        with ScreenPool(self.settings(shape), gpus, self.cache, self.cores) as pool:
            start_s = time.time() - began
            self.log(f"{name} {phase}: {len(gpus)} GPU(s) up in {start_s:.0f} s; screening {len(configs)} configs")
            results, stats = pool.screen(self.args.batch, configs, deadline=self.deadline)
        pick_us = next((r.us for r in results if r.config == pick.config.code() and r.ok), None)
        row = Row(shape=name, phase=phase, gpus=len(gpus), bucket=self.args.batch, configs=len(configs),
                  screened=stats.screened, ok=stats.ok, wall_s=stats.wall_s, start_s=start_s,
                  per_gpu=stats.per_second / len(gpus), first_at_s=stats.first_at_s,
                  steady_per_gpu=stats.steady_per_second / len(gpus) if stats.steady_per_second else None,
                  hit_rate=stats.hit_rate, compile_jobs=stats.compile_jobs,
                  compile_cached=stats.compile_cached, compile_s=stats.compile_s, restarts=stats.restarts, failed=stats.failed, best=stats.best,
                  best_us=stats.best_us, best_index=stats.best_index, best_at_s=stats.best_at_s,
                  pick=pick.config.code(), pick_us=pick_us, dropped=len(order.pruned))
        self.emit(row)
        self.log(f"{name} {phase}: {row.screened}/{row.configs} in {row.wall_s:.0f} s, {row.per_gpu:.1f} configs/s "
                 f"per GPU, hit rate {row.hit_rate}, best {row.best} {row.best_us} us (SGLang's pick {row.pick_us})")
        return row

    def tiers(self, name: str, shape: MoeShape) -> None:
        left = self.deadline - time.time()
        if left < TIERS_MIN_S:
            self.log(f"{name} tiers: skipped, {left:.0f} s left (needs {TIERS_MIN_S})")
            return
        from astra_sglang.optimize.tuner.moe_run import Facts, TuneOptions, tune_fused_moe

        buckets = [int(b) for b in self.args.buckets.split(",")]
        screen = ScreenOptions(gpus=self.gpus, budget_s=min(self.args.screen_budget, left / 3),
                               finalists=self.args.finalists, prune=None, compile_workers=self.cores,
                               deadline=self.deadline)
        if self.args.simulate:
            screen.target, screen.launch_options = SIMULATE, self.settings(shape).options
            facts = Facts(gpu=self.gpu, smem=self.smem, triton="3.6.0", sglang="simulated", source_hash="0" * 64)
            picks = {p.tokens: p.config for p in moe_configs.sglang_picks(
                shape.experts, shape.inter, shape.hidden, shape.topk, buckets)}
            batch = SimulatedEvaluator(shape, self.gpu, picks.__getitem__)
        else:
            from astra_sglang.optimize.pool.pool import LocalPool
            from astra_sglang.optimize.tuner.moe_run import facts_here

            facts, pool = facts_here(), LocalPool(self.gpus)
            batch = pool.map
        options = TuneOptions(use_cache=False, patches_dir=Path(self.args.work) / "patches", screen=screen,
                              timeout_s=max(60.0, left - 30), budget_s=left - 30,
                              command=f"moe_screen_bench tiers {name}")
        os.environ["TRITON_CACHE_DIR"] = str(self.cache)
        try:
            result = tune_fused_moe(shape, buckets, self.out / f"tune-{name}", options, batch, facts=facts,
                                    echo=self.log)
        finally:
            if not self.args.simulate:
                pool.close()
        for b in result.buckets:
            ratio = b.screen_pick_us / b.screen_us if b.screen_pick_us and b.screen_us else None
            self.emit(TierRow(shape=name, tokens=b.tokens, pick=b.pick, pick_source=b.pick_source,
                              screened=b.screened, screen_best=b.screen_best, screen_ratio=ratio, chosen=b.chosen,
                              verdict=b.verdict, final_speedup=b.final_speedup))

    def run(self) -> None:
        phases = self.args.phases.split(",")
        for name in self.args.shapes.split(","):
            shape = SHAPES[name]
            if "cold" in phases:
                self.screen(name, "cold", shape, self.gpus[:1], None)
            if "warm1" in phases:
                self.screen(name, "warm1", shape, self.gpus[:1], self.args.warm)
            if "warm2" in phases and len(self.gpus) > 1:
                self.screen(name, "warm2", shape, self.gpus[:2], self.args.warm)
        if "tiers" in phases:
            for name in self.args.shapes.split(","):
                self.tiers(name, SHAPES[name])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--work", help="scratch folder (Triton cache, patches; default OUT/work)")
    p.add_argument("--shapes", default="qwen3,mixtral")
    p.add_argument("--phases", default="cold,warm1,warm2,tiers")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--warm", type=int, default=600, help="configs of the order the warm phases screen")
    p.add_argument("--buckets", default="1,16,64,256,1024,4096", help="the tiers phase's batch sizes")
    p.add_argument("--screen-budget", type=float, default=120.0, help="the tiers phase's screening seconds")
    p.add_argument("--finalists", type=int, default=2)
    p.add_argument("--deadline", type=float, default=480.0, help="seconds from the start: no phase starts past it")
    p.add_argument("--simulate", action="store_true", help="simulated GPUs: the cost model's times (CPU)")
    p.add_argument("--sim-compile-s", type=float, default=0.005)
    p.add_argument("--sim-call-s", type=float, default=0.002)
    p.add_argument("--table", action="store_true", help="only write the summary of OUT/moe_screen.jsonl")
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    args.work = args.work or str(out / "work")
    if not args.table:
        (out / "moe_screen.jsonl").unlink(missing_ok=True)
        Bench(args).run()
    rows = [json.loads(line) for line in (out / "moe_screen.jsonl").read_text().splitlines()] \
        if (out / "moe_screen.jsonl").is_file() else []
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    header = (f"{dt.date.today().isoformat()}, commit {commit or 'unknown'}, "
              f"{'simulated GPUs' if args.simulate else 'GPU run'}: `python3 {' '.join(sys.argv)}`")
    text = render(rows, header)
    (out / "moe_screen.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
