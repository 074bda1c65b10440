"""Fused MoE's screening tier at speed, and the two tiers against SGLang's shipped pick, in one GPU command.

One plan for a 2- or 4-GPU machine and a deadline (--deadline seconds):
  tiers   (both --shapes) in a child process (benchmarks/moe_tiers_bench.py) on the tier GPUs (GPUs 2.. on a
          4-GPU host, GPU 1 on a 2-GPU one; every GPU without scaling phases) from the start, on half of the CPU
          cores: SGLang's whole space screened per batch size (--buckets first, SGLang's other batch sizes while
          its deadline allows), the finalists through the isolated evaluator against SGLang's pick.
  scaling (--scale-shapes, qwen3 by default; bf16, batch --batch) on GPU 0 (and 1), the other half of the cores,
          one worker per GPU for the whole run (SGLang imported and the inputs built once, both GPUs prepared
          at once before the first phase):
    cold    GPU 0, an empty Triton cache: SGLang's whole tuning space (1,920 configs; those that cannot fit in
            shared memory dropped unbuilt) in screening order, Triton compiling ahead on the CPU cores
    warm1   GPU 0: the first --warm configs of the order (kernels loaded in the worker by the cold phase)
    warm2   GPUs 0 and 1, the same configs (GPU 1 loads them from the disk cache); on a 2-GPU host after the
            tiers child has given GPU 1 back. Two-GPU scaling: warm1 over warm2, wall to wall and timed part.
Per screening phase: configs timed per second per GPU (a config that failed before its timing does not count),
wall, compile-ahead hit rate, compile jobs and their CPU seconds, the best config, its position and when it came,
SGLang's pick's time, and per failing stage its first distinct reasons. A phase where more than half the configs
fail at one stage is a broken set-up: the bench says FAILED, skips the rest of its scaling phases and exits 1.
Rows go to OUT/moe_screen.jsonl as they finish (the child's records to OUT/tiers/); OUT/moe_screen.md is the
summary, the child's OUT/tiers/tiers.md its last section. The commit named is ASTRA_COMMIT, else git's HEAD.

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

from moe_bench_setup import (SHAPES, SIMULATED_GPU, SIMULATED_SMEM, add_simulate_args, simulate_lookup,
                             simulated_settings)
from moe_screen_table import render
from provenance import command, commit
from pydantic import BaseModel

from astra_sglang.optimize.tuner.moe_order import gpu_model, ordered
from astra_sglang.optimize.tuner.moe_two_tier import LAUNCH
from astra_sglang.optimize.tuner.screen_pool import ScreenPool
from astra_sglang.optimize.tuner.screen_worker_handle import WorkerSettings
from astra_sglang.triton.moe import configs as moe_configs
from astra_sglang.triton.moe.shapes import MoeShape

TIERS_SHARE = 0.72
"""Of the deadline, the tiers child's on a 2-GPU host (GPU 1 then joins the warm2 phase); with 3+ GPUs it runs
to the deadline's end."""
COLD_SHARE = 0.55
"""Of the deadline, the most the cold phase may take (warm1 and warm2 come after it)."""
FAILING_SHARE = 0.5
"""More than this share of a phase's configs failing at one stage is a broken set-up, not bad configs."""


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
    timed: int = 0
    """Configs checked and timed: what configs/s counts."""
    reasons: dict[str, list[str]] = {}
    """Failing stage -> its first distinct reasons."""
    failing: str | None = None
    """The stage where more than FAILING_SHARE of the configs failed: the phase's figures are no throughput."""
    cores: int = 0
    """CPU processes compiling ahead."""


class Bench:
    def __init__(self, args):
        self.args, self.out = args, Path(args.out)
        self.began = time.time()
        self.deadline = self.began + args.deadline
        self.cache = Path(args.work) / "triton-cache"
        self.failures: list[str] = []
        if args.simulate:
            self.gpu, self.smem, self.gpus = SIMULATED_GPU, SIMULATED_SMEM, ["0", "1"]
            simulate_lookup()
        else:
            from astra_sglang.optimize.tuner.moe_run import facts_here

            facts = facts_here()
            self.gpu, self.smem = facts.gpu, facts.smem
        if args.gpus or not args.simulate:
            from astra_sglang.optimize.pool.devices import visible_gpus

            self.gpus = visible_gpus(args.gpus)
        self.cores = args.cores or max(1, (os.cpu_count() or 2) - len(self.gpus))

    def log(self, text: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)

    def fail(self, text: str) -> None:
        self.failures.append(text)
        self.log(f"FAILED: {text}")

    def emit(self, row: BaseModel) -> None:
        with (self.out / "moe_screen.jsonl").open("a") as fh:
            fh.write(row.model_dump_json() + "\n")

    def settings(self, shape: MoeShape) -> WorkerSettings:
        if self.args.simulate:
            return simulated_settings(shape, self.args.sim_compile_s, self.args.sim_call_s, self.args.sim_faults)
        return WorkerSettings(target=LAUNCH, options={"experts": shape.experts, "inter": shape.inter,
                                                      "hidden": shape.hidden, "topk": shape.topk})

    # -- the plan ------------------------------------------------------------------------------------------------
    def tier_gpus(self) -> list[str]:
        return self.gpus[2:] if len(self.gpus) >= 3 else self.gpus[1:]

    def run(self) -> None:
        phases = self.args.phases.split(",")
        scaling = [p for p in ("cold", "warm1", "warm2") if p in phases]
        child = None
        if "tiers" in phases:
            beside = bool(scaling) and len(self.gpus) >= 2
            child = self.start_tiers_child(self.tier_gpus() if beside else self.gpus, beside)
        if scaling:
            for name in self.args.scale_shapes.split(","):
                self.scaling(name, SHAPES[name], scaling, child)
        if child is not None:
            self.join_tiers_child(child)

    def start_tiers_child(self, gpus: list[str], beside: bool) -> subprocess.Popen:
        a = self.args
        share = TIERS_SHARE * a.deadline if beside and len(self.gpus) < 3 else a.deadline - 30
        self.tier_cores = max(1, self.cores // 2) if beside else self.cores
        self.cores = max(1, self.cores - self.tier_cores)
        cmd = [sys.executable, str(Path(__file__).resolve().parent / "moe_tiers_bench.py"), "--out",
               str(self.out / "tiers"), "--work", str(Path(a.work) / "tiers"), "--shapes", a.shapes,
               "--gpus", ",".join(gpus), "--cores", str(self.tier_cores), "--deadline", f"{share:.0f}",
               "--buckets", a.buckets, "--extra", a.extra, "--finalists", str(a.finalists)]
        if a.simulate:
            cmd += ["--simulate", "--sim-compile-s", str(a.sim_compile_s), "--sim-call-s", str(a.sim_call_s),
                    "--sim-faults", a.sim_faults]
        self.log(f"tiers of {a.shapes} on GPU(s) {','.join(gpus)} ({self.tier_cores} compile processes, {share:.0f} s)"
                 f" beside the scaling phases ({self.cores} compile processes); its log: tiers/bench.log")
        (self.out / "tiers").mkdir(parents=True, exist_ok=True)
        log = (self.out / "tiers" / "bench.log").open("w")
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)

    def join_tiers_child(self, child: subprocess.Popen) -> None:
        try:
            rc = child.wait(timeout=max(1.0, self.deadline + 45 - time.time()))
        except subprocess.TimeoutExpired:
            child.kill()
            rc = child.wait()
        if not (self.out / "tiers" / "tiers.md").is_file():  # cut: its summary from the records it left
            subprocess.run(child.args + ["--table"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
        if rc != 0:
            self.fail(f"the tiers process exited with code {rc} (tiers/bench.log)")
        self.log(f"tiers process done (exit code {rc})")

    # -- scaling phases: one pool for the whole run ----------------------------------------------------------------
    def scaling(self, name: str, shape: MoeShape, phases: list[str], child) -> None:
        if time.time() >= self.deadline:
            self.log(f"{name}: scaling phases skipped, past the deadline")
            return
        batch = self.args.batch
        pick = moe_configs.sglang_picks(shape.experts, shape.inter, shape.hidden, shape.topk, [batch],
                                         shape.config_dtype)[0]
        order = ordered(shape, batch, pick.config, gpu_model(self.gpu, self.smem), prune=None)
        first, second = self.gpus[0], (self.gpus[1] if len(self.gpus) > 1 else None)
        shared = child is not None and second in self.tier_gpus()
        began = time.time()
        # Both workers start and prepare at once, before any phase's clock (on a 2-GPU host GPU 1's sits idle
        # until the tiers process is done with that GPU: no timing shares a GPU).
        with ScreenPool(self.settings(shape), [first] + ([second] if second else []), self.cache, self.cores) as pool:
            pool.prepare(batch)
            start_s = time.time() - began
            self.log(f"{name}: workers up and the batch size prepared in {start_s:.0f} s")
            for phase in phases:
                if phase == "warm2":
                    if second is None:
                        break
                    if shared and child.poll() is None:
                        self.log(f"{name} warm2: waiting for the tiers process to give GPU {second} back")
                        try:
                            child.wait(timeout=max(1.0, self.deadline - time.time()))
                        except subprocess.TimeoutExpired:
                            self.log(f"{name} warm2: skipped, GPU {second} still busy at the deadline")
                            return
                    gpus = [first, second]
                else:
                    gpus = [first]
                codes = order.codes if phase == "cold" else order.codes[:self.args.warm]
                stop = min(self.deadline, self.began + COLD_SHARE * self.args.deadline) if phase == "cold" \
                    else self.deadline
                row = self.phase(pool, name, phase, gpus, codes, stop, start_s, pick.config.code(), len(order.pruned))
                start_s = 0.0
                if row is None or row.failing:
                    return

    def phase(self, pool: ScreenPool, name: str, phase: str, gpus: list[str], configs: list[str], stop: float,
              start_s: float, pick: str, dropped: int) -> Row | None:
        if time.time() >= stop:
            self.log(f"{name} {phase}: skipped, past the deadline")
            return None
        self.log(f"{name} {phase}: screening {len(configs)} configs on GPU(s) {','.join(gpus)}")
        results, stats = pool.screen(self.args.batch, configs, deadline=stop, only=gpus)
        pick_us = next((r.us for r in results if r.config == pick and r.ok), None)
        failing = stats.failing_stage(FAILING_SHARE)
        row = Row(shape=name, phase=phase, gpus=len(gpus), bucket=self.args.batch, configs=len(configs),
                  screened=stats.screened, ok=stats.ok, timed=stats.timed, wall_s=stats.wall_s, start_s=start_s,
                  per_gpu=stats.per_second / len(gpus), first_at_s=stats.first_at_s,
                  steady_per_gpu=stats.steady_per_second / len(gpus) if stats.steady_per_second else None,
                  hit_rate=stats.hit_rate, compile_jobs=stats.compile_jobs, compile_cached=stats.compile_cached,
                  compile_s=stats.compile_s, restarts=stats.restarts, failed=stats.failed, reasons=stats.reasons,
                  failing=failing, cores=self.cores, best=stats.best, best_us=stats.best_us,
                  best_index=stats.best_index, best_at_s=stats.best_at_s, pick=pick, pick_us=pick_us,
                  dropped=dropped)
        self.emit(row)
        self.log(f"{name} {phase}: {row.screened}/{row.configs} screened, {row.timed} timed in {row.wall_s:.0f} s, "
                 f"{row.per_gpu:.1f} configs timed/s per GPU, hit rate {row.hit_rate}, best {row.best} "
                 f"{row.best_us} us (SGLang's pick {row.pick_us})")
        for note in stats.notes:
            self.log(f"{name} {phase}: {note}")
        if failing:
            self.fail(f"{name} {phase}: {stats.failed[failing]} of {stats.screened} configs failed at {failing}: "
                      + " | ".join(stats.reasons.get(failing, [])))
        return row


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--work", help="scratch folder (Triton cache, patches; default OUT/work)")
    p.add_argument("--shapes", default="qwen3,mixtral", help="the tiers' shapes")
    p.add_argument("--scale-shapes", default="qwen3", help="the scaling phases' shapes (cold, warm1, warm2)")
    p.add_argument("--phases", default="cold,warm1,warm2,tiers")
    p.add_argument("--gpus", help="GPU ids (default: the visible ones)")
    p.add_argument("--cores", type=int, help="compile processes (default: one per CPU core but one per GPU)")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--warm", type=int, default=600, help="configs of the order the warm phases screen")
    p.add_argument("--buckets", default="", help="the tiers' batch sizes tried first")
    p.add_argument("--extra", default="all", help="the tiers' batch sizes planned while the deadline allows")
    p.add_argument("--finalists", type=int, default=2, help="the tiers' plain configs per batch size")
    p.add_argument("--deadline", type=float, default=480.0, help="seconds from the start: no phase starts past it")
    add_simulate_args(p, compile_s=0.005, call_s=0.002)
    p.add_argument("--table", action="store_true", help="only write the summary of OUT/moe_screen.jsonl")
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    args.work = args.work or str(out / "work")
    failures = []
    if not args.table:
        (out / "moe_screen.jsonl").unlink(missing_ok=True)
        bench = Bench(args)
        bench.run()
        failures = bench.failures
    rows = [json.loads(line) for line in (out / "moe_screen.jsonl").read_text().splitlines()] \
        if (out / "moe_screen.jsonl").is_file() else []
    header = (f"{dt.date.today().isoformat()}, commit {commit()}, "
              f"{'simulated GPUs' if args.simulate else 'GPU run'}: "
              f"`{command('benchmarks/moe_screen_bench.py', sys.argv[1:], args.out)}`")
    tiers = out / "tiers" / "tiers.md"
    text = render(rows, header, tiers.read_text() if tiers.is_file() else None)
    (out / "moe_screen.md").write_text(text)
    print(text)
    failures += [f"{r['shape']} {r.get('phase', 'tiers')}: most configs failed at {r['failing']}" for r in rows
                 if r.get("failing") and args.table]
    for line in failures:
        print(f"FAILED: {line}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
