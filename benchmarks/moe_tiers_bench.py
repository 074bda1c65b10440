"""Fused MoE's two tiers for several expert shapes on a chosen set of GPUs, within a deadline, resumable.

SGLang's whole tuning space (and the split-K source knob's variants beside it) screened for every batch size, the
finalists judged by the strict isolated evaluator against SGLang's shipped pick (astra_sglang/optimize/tuner/
moe_tiers.py). Results go to OUT as they come: screen/*.jsonl (every config), units.jsonl, verdicts.jsonl, strict/
(each strict call's run folder: tune.json, tune.md, final.json, a patch where a config won), plan.json (the units,
the deferred ones, the estimate), tiers.md (per batch size: screened / space, screened best against the pick, the
verdict, what is left and why; `--table` writes it from the records alone, for a run cut short). --resume DIR
continues an earlier OUT (its records copied into OUT first): screened batch sizes are not screened again, judged
ones not judged again. The commit named is ASTRA_COMMIT, else git's HEAD.

Usage (GPU machine, through benchmarks/gpu/moe_tiers.sh): python3 benchmarks/moe_tiers_bench.py --out DIR
      python3 benchmarks/moe_tiers_bench.py --out DIR --simulate    # CPU: simulated GPUs (the cost model's times)
      python3 benchmarks/moe_tiers_bench.py --out DIR --plan-only "NVIDIA H200" --gpus 0,1,2,3 --cores 36
                                                                    # the plan such a call makes, and its estimate
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

from moe_bench_setup import (SHAPES, SIMULATED_GPU, SIMULATED_SMEM, add_simulate_args, simulate_lookup,
                             simulated_settings)
from provenance import commit

from astra_sglang.errors import AstraError
from astra_sglang.optimize.tuner.moe_costs import Costs
from astra_sglang.optimize.tuner.moe_tiers import PlanRefused, TiersSetup, plan_tiers, run_tiers, shape_plans
from astra_sglang.optimize.tuner.moe_tiers_records import Records
from astra_sglang.optimize.tuner.moe_tiers_report import bucket_lines, render
from astra_sglang.triton.moe import configs as moe_configs
from astra_sglang.triton.moe.space import SMEM_BYTES


def _sizes(text: str) -> list[int]:
    if text.strip() == "all":
        return list(moe_configs.BATCH_SIZES)
    return [int(x) for x in text.split(",") if x.strip()]


def picks_at(shape, sizes):
    return moe_configs.sglang_picks(shape.experts, shape.inter, shape.hidden, shape.topk, sizes, shape.config_dtype)


def setup_of(args) -> tuple[TiersSetup, object]:
    """The run's setup, and what to close after it (the strict tier's GPU pool, or None)."""
    shapes = {n: SHAPES[n] for n in args.shapes.split(",")}
    common = dict(shapes=shapes, core=_sizes(args.buckets), extra=_sizes(args.extra), deadline_s=args.deadline,
                  out=Path(args.out), triton_cache=Path(args.work) / "triton-cache", picks_at=picks_at,
                  resume=Path(args.resume) if args.resume else None, cores=args.cores, finalists=args.finalists,
                  knob=args.knob, knob_finalists=args.knob_finalists, require=args.require)
    from astra_sglang.optimize.pool.devices import visible_gpus

    if args.simulate:
        from astra_sglang.optimize.tuner.moe_run import Facts
        from astra_sglang.optimize.tuner.moe_simulate import SimulatedEvaluator

        simulate_lookup()
        facts = Facts(gpu=SIMULATED_GPU, smem=SIMULATED_SMEM, triton="3.6.0", sglang="simulated",
                      source_hash="0" * 64)

        def evaluator(shape):
            return SimulatedEvaluator(shape, SIMULATED_GPU, lambda t: picks_at(shape, [t])[0].config)

        gpus = visible_gpus(args.gpus) or ["0", "1"]
        # the simulated workers start at once and compile processes import no SGLang; compiles take their seconds
        costs = Costs(start_s=2.0, compile_start_s=1.0, compile_s=args.sim_compile_s)

        def settings(shape):
            return simulated_settings(shape, args.sim_compile_s, args.sim_call_s, args.sim_faults, per_bucket=True)

        return TiersSetup(gpus=gpus, facts=facts, evaluator=evaluator, costs=costs, settings=settings, **common), None
    if args.plan_only:  # the GPU named, its SGLang config files, this host's GPUs or those given: no GPU work
        from astra_sglang.optimize.tuner.moe_run import Facts

        moe_configs.sglang_module().get_device_name = lambda: args.plan_only
        facts = Facts(gpu=args.plan_only, smem=SMEM_BYTES, triton="3.6.0", sglang="planned", source_hash="0" * 64)
        return TiersSetup(gpus=visible_gpus(args.gpus) or ["0"], facts=facts, evaluator=None, **common), None
    from astra_sglang.optimize.pool.pool import LocalPool
    from astra_sglang.optimize.tuner.moe_run import facts_here

    gpus = visible_gpus(args.gpus)
    if args.table:  # the summary only: no GPU work, no pool
        return TiersSetup(gpus=gpus, facts=facts_here(), evaluator=None, **common), None
    if not gpus:
        raise AstraError("no GPU to run on: set GPUS (e.g. 2,3) or CUDA_VISIBLE_DEVICES")
    pool = LocalPool(gpus)
    return TiersSetup(gpus=gpus, facts=facts_here(), evaluator=lambda shape: pool.map, **common), pool


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--resume", help="an earlier run's OUT to continue")
    p.add_argument("--work", help="scratch folder (the Triton cache; default OUT/work)")
    p.add_argument("--shapes", default="qwen3,mixtral")
    p.add_argument("--buckets", default="1,16,64,256,1024,4096", help="batch sizes tried first in the plan")
    p.add_argument("--extra", default="all", help="batch sizes planned while the deadline allows ('all': SGLang's 18)")
    p.add_argument("--gpus", help="GPU ids (default: the visible ones)")
    p.add_argument("--cores", type=int, help="compile processes (default: one per CPU core but one per GPU)")
    p.add_argument("--deadline", type=float, default=480.0, help="seconds from the start")
    p.add_argument("--finalists", type=int, default=2, help="plain configs per batch size to the strict tier")
    p.add_argument("--knob", default="splitk", help="source knob screened beside the configs ('' for none)")
    p.add_argument("--knob-finalists", type=int, default=1, help="the knob's variants per batch size (strict tier)")
    add_simulate_args(p, compile_s=0.002, call_s=0.0005)
    p.add_argument("--require", action="store_true", help="refuse to start (exit 3, before any worker) where the "
                   "plan defers a --buckets batch size; the error names the deadline that fits")
    p.add_argument("--table", action="store_true", help="only write tiers.md from OUT's records (a cut run's)")
    p.add_argument("--plan-only", metavar="GPU_NAME", help="only print the plan a call would make on GPUs of this "
                   "name (e.g. 'NVIDIA H200'; --gpus and --cores as that call's)")
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    args.work = args.work or str(out / "work")
    try:
        setup, pool = setup_of(args)
        if args.plan_only:
            plan, _, _ = plan_tiers(setup, Records(out), args.deadline)
            for p in plan.fit.timeline.placed:
                print(f"  {p.unit.name}: GPU {setup.gpus[p.gpu]}, {p.start_s:.0f}-{p.end_s:.0f} s, "
                      f"{p.screened} of {p.unit.configs} configs")
            return 0
        if args.table:
            setup.resume, plans = None, shape_plans(setup, Records(out), None)
            deferred = set(json.loads((out / "plan.json").read_text())["deferred"]) \
                if (out / "plan.json").is_file() else set()
        else:
            try:
                plan, plans = run_tiers(setup, echo=lambda text: print(f"[{dt.datetime.now():%H:%M:%S}] {text}",
                                                                        flush=True))
            finally:
                if pool is not None:
                    pool.close()
            deferred = {u.name for u in plan.deferred}
    except AstraError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3 if isinstance(exc, PlanRefused) else 1
    lines = bucket_lines(plans, Records(out), sorted(set(setup.core) | set(setup.extra)), deferred, setup.facts.gpu)
    header = (f"{dt.date.today().isoformat()}, commit {commit()}, {setup.facts.gpu} x{len(setup.gpus)} (GPUs "
              f"{','.join(setup.gpus)}){', simulated GPUs' if args.simulate else ''}: `python3 {' '.join(sys.argv)}`")
    text = render(lines, header)
    (out / "tiers.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
