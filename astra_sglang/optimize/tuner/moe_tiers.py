"""Fused MoE's two tiers for several expert shapes on a chosen set of a host's GPUs, within a deadline, resumable.

1. The plan (moe_tiers_plan.make_plan): per shape and batch size, SGLang's whole tuning space in screening order
   (and, at batch sizes where a split is worth measuring, the source knob's variants of the best configs), less
   what the output folder holds from an earlier run; the units farthest from their floor first, the `core` batch
   sizes tried before the `extra` ones, each joining while the budget model's estimate of the whole run
   (moe_budget) ends by the deadline, the rest deferred.
2. The screening tier: one ScreenPool per shape with a worker on each GPU (one compile pool for all); every
   unit's compiles recorded and queued by when a GPU needs them, the units scheduled one per GPU once their
   compiles are far enough ahead (screen_schedule), stopped where the strict tier's estimate must start; every
   result is appended to the folder as it comes (moe_tiers_records).
3. The strict tier: per shape, the batch sizes screened whole (or cut by the deadline past
   two_tier.JUDGE_CUT_SHARE of their order, said in their verdicts) and not judged yet; where a config
   (or a knob variant) screened as fast as SGLang's pick, its finalists go through the isolated evaluator
   (moe_run.tune_fused_moe with the screening given), all shapes at once over the GPUs; elsewhere SGLang's pick is
   kept without an evaluation. A shape whose evaluations would end past the deadline is left to a resumed run.
A second call with the first's folder (`resume`) continues: screened batch sizes are not screened again, judged
ones not judged again. The summary (moe_tiers_report) says per batch size what happened and what is left.
"""
from __future__ import annotations

import json
import math
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from astra_sglang.errors import AstraError
from astra_sglang.harness.records import EvalResult
from astra_sglang.optimize.tuner.bucket import Batch
from astra_sglang.optimize.tuner.compile_pool import CompilePool
from astra_sglang.optimize.tuner.moe_budget import Strict
from astra_sglang.optimize.tuner.moe_costs import Costs
from astra_sglang.optimize.tuner.moe_run import Facts, TuneOptions, tune_fused_moe
from astra_sglang.optimize.tuner.moe_tiers_plan import Plan, ShapePlan, least_deadline, make_plan, shape_plan
from astra_sglang.optimize.tuner.moe_tiers_records import Records, UnitRow, VerdictRow, unit_name
from astra_sglang.optimize.tuner.moe_two_tier import LAUNCH, finalists_by_bucket
from astra_sglang.optimize.tuner.screen_pool import ScreenPool
from astra_sglang.optimize.tuner.screen_schedule import Schedule, UnitResult
from astra_sglang.optimize.tuner.screen_worker_handle import WorkerLost, WorkerSettings
from astra_sglang.optimize.tuner.two_tier import BucketScreen, judgeable
from astra_sglang.triton.moe.configs import Pick
from astra_sglang.triton.moe.provider import KernelSourceProvider
from astra_sglang.triton.moe.shapes import MoeShape
from astra_sglang.triton.moe.source_op import screen_hook


@dataclass
class TiersSetup:
    shapes: dict[str, MoeShape]
    core: list[int]
    extra: list[int]
    gpus: list[str]
    deadline_s: float
    """Seconds from the start: no screening or evaluation is started that the budget model ends past it."""
    out: Path
    triton_cache: Path
    facts: Facts
    picks_at: Callable[[MoeShape, list[int]], list[Pick]]
    evaluator: Callable[[MoeShape], Batch]
    """The strict tier's batch for a shape (a LocalPool's map over the GPUs; one thread per shape calls it)."""
    settings: Callable[[MoeShape], WorkerSettings] | None = None
    """A screening worker's settings per shape (None: SGLang's launch, moe_screen.py, with the knob's hook)."""
    resume: Path | None = None
    cores: int | None = None
    finalists: int = 2
    knob: str = ""
    """A source knob ("splitk") screened and judged beside the configs; "" for none."""
    knob_finalists: int = 1
    costs: Costs = field(default_factory=Costs)
    require: bool = False
    """Refuse to start (PlanRefused, before any worker) where the plan defers a plain unit of a `core` batch size: a
    comparison at those batch sizes (moe_ours_vs_bar.sh) that would judge none of them wastes its GPU call."""


class PlanRefused(AstraError):
    """The plan defers a batch size the call requires; the message names the deadline that fits it."""


def run_tiers(setup: TiersSetup, echo: Callable[[str], None] = print) -> tuple[Plan, dict[str, ShapePlan]]:
    """Plan, screen and judge (see the module docstring); everything is in `setup.out`'s records."""
    began = time.time()
    deadline = began + setup.deadline_s
    records = Records(setup.out)
    if setup.resume:
        records.adopt(setup.resume)
    plan, plans, cores = plan_tiers(setup, records, deadline - time.time(), echo)
    line = plan.fit.timeline
    if plan.units:
        screen(setup, plan, records, deadline - (line.strict_s - line.screen_s), cores, echo)
    judge(setup, plans, records, plan.knob, deadline, echo)
    return plan, plans


def plan_tiers(setup: TiersSetup, records: Records, left_s: float, echo: Callable[[str], None] = print
               ) -> tuple[Plan, dict[str, ShapePlan], int]:
    """The plan for the `left_s` seconds left (written to plan.json and told), its shapes' plans and the compile
    processes it counts on."""
    knob = KernelSourceProvider(setup.knob) if setup.knob else None
    plans = shape_plans(setup, records, knob)
    cores = setup.cores or max(1, (os.cpu_count() or 2) - len(setup.gpus))
    strict = Strict(setup.finalists, setup.knob_finalists if knob else 0)

    def plan_for(seconds: float) -> Plan:
        return make_plan(plans, setup.core, [t for t in setup.extra if t not in setup.core], setup.facts,
                         len(setup.gpus), cores, seconds, knob, costs=setup.costs, strict=strict)

    def short(p: Plan) -> list[str]:
        return [u.name for u in p.deferred if not u.knob and u.tokens in setup.core]

    plan = plan_for(left_s)
    if setup.require and short(plan):
        raise PlanRefused(f"the plan defers {', '.join(short(plan))} with {left_s:.0f} s left on GPU(s) "
                          f"{','.join(setup.gpus)} and {cores} compile processes: "
                          + least_deadline(left_s, plan_for, short))
    line = plan.fit.timeline
    (setup.out / "plan.json").write_text(json.dumps({
        "gpus": setup.gpus, "units": [u.name for u in plan.units], "deferred": sorted(u.name for u in plan.deferred),
        "done_earlier": plan.done, "estimate_s": {"screen": line.screen_s, "end": line.strict_s},
        # SGLang's pick at every batch size planned, deferred ones included: what a written file keeps there
        "picks": {name: {str(t): {"config": p.config.code(), "from": p.describe()} for t, p in sorted(sp.picks.items())}
                  for name, sp in plans.items()},
        "placed": [{"unit": p.unit.name, "gpu": p.gpu, "start_s": round(p.start_s, 1), "end_s": round(p.end_s, 1)}
                   for p in line.placed]}, indent=1))
    echo(f"plan: {len(plan.units)} units on GPU(s) {','.join(setup.gpus)} ({cores} compile processes), screening "
         f"about {line.screen_s:.0f} s, the strict tier about {line.strict_s - line.screen_s:.0f} s; "
         f"{len(plan.deferred)} deferred, {len(plan.done)} screened by an earlier run")
    if plan.fit.chosen:
        echo("order (SGLang's pick at % of its floor's speed): " + ", ".join(
            f"{u.name} {100 / u.gap:.0f}%" for u in plan.fit.chosen if not u.knob))
    return plan, plans, cores


def shape_plans(setup: TiersSetup, records: Records, knob: KernelSourceProvider | None) -> dict[str, ShapePlan]:
    """Every shape's batch sizes not judged yet, with what the records hold screened there."""
    judged = records.verdicts()
    buckets = sorted(set(setup.core) | set(setup.extra))
    out = {}
    for name, shape in setup.shapes.items():
        picks = {p.tokens: p for p in setup.picks_at(shape, buckets) if (name, p.tokens) not in judged}
        # the knob's variants run unquantized shapes only (moe_screen)
        sp = shape_plan(name, shape, picks, setup.facts.gpu, setup.facts.smem, setup.facts, None,
                        None if shape.quantized else knob, [] if shape.quantized else list(picks))
        sp.known = {t: records.known(unit_name(name, t)) for t in picks}
        sp.knob_known = {t: records.known(unit_name(name, t, True)) for t in sp.knob_tokens}
        out[name] = sp
    return out


def _settings(setup: TiersSetup, shape: MoeShape, knob: KernelSourceProvider | None) -> WorkerSettings:
    if setup.settings:
        return setup.settings(shape)
    variants = {knob.name: screen_hook(knob.name)} if knob and not shape.quantized else {}
    return WorkerSettings(target=LAUNCH, options={"experts": shape.experts, "inter": shape.inter,
                                                  "hidden": shape.hidden, "topk": shape.topk, "dtype": shape.dtype,
                                                  **({"quant": shape.quant} if shape.quantized else {}),
                                                  **({"variants": variants} if variants else {})})


def screen(setup: TiersSetup, plan: Plan, records: Records, until: float, cores: int, echo) -> None:
    """The plan's units over the GPUs until `until`, each result and each unit's end recorded as they come."""
    names = list(dict.fromkeys(u.op for u in plan.units))
    compiler = CompilePool(cores, setup.triton_cache)
    pools: dict[str, ScreenPool] = {}

    def start(name: str) -> ScreenPool:
        return ScreenPool(_settings(setup, plan.shapes[name].shape, plan.knob), list(setup.gpus),
                          setup.triton_cache, compiler=compiler)

    def ended(result: UnitResult) -> None:
        s = result.stats
        queued, new = schedule.queued.get(result.unit.name, (None, None))
        records.unit(UnitRow(name=result.unit.name, shape=result.unit.op, tokens=result.unit.bucket,
                             knob=result.unit.after is not None, configs=len(result.configs), screened=s.screened,
                             timed=s.timed, wall_s=s.wall_s, gpu=result.gpu,
                             complete=s.screened == len(result.configs), best=s.best, best_us=s.best_us,
                             start_s=result.start_s, specializations=queued, new_specializations=new))

    started = time.time()
    try:
        with ThreadPoolExecutor(len(names)) as ex:  # each pool's workers import SGLang and draw weights at once
            for name, pool in zip(names, ex.map(start, names)):
                pools[name] = pool
        schedule = Schedule(pools, list(setup.gpus), deadline=until, echo=echo, on_result=records.screened,
                            on_unit=ended)
        queued = schedule.prefetch(plan.units)
        records.specializations(schedule.found)
        echo(f"screening: workers up and {len(schedule.queued)} units recorded in {time.time() - started:.0f}"
             f" s; {queued} specializations queued ahead ({sum(q - n for q, n in schedule.queued.values())} of the "
             f"units' shared with an earlier unit)")
        schedule.run(plan.units)
    except WorkerLost as lost:
        raise AstraError(f"a screening worker did not start: {lost.reason.splitlines()[0]}") from None
    finally:
        for pool in pools.values():
            pool.close()
        compiler.close()


def judge(setup: TiersSetup, plans: dict[str, ShapePlan], records: Records, knob: KernelSourceProvider | None,
          deadline: float, echo) -> None:
    """The strict tier over every shape's batch sizes screened whole (see the module docstring)."""
    jobs = []
    units = {u.name: u for u in records.units()}
    for name, sp in plans.items():
        ready = {t: records.known(unit_name(name, t)) for t in sp.picks}
        ready = {t: k for t, k in ready.items() if judgeable(k, sp.orders[t].codes)}
        screens = {t: _with_unit(BucketScreen.of(t, k, sp.orders[t].codes), units.get(unit_name(name, t)))
                   for t, k in ready.items()}
        knobs = {t: records.known(unit_name(name, t, True)) for t in ready} if knob else {}
        knob_screens = {t: BucketScreen.of(t, k) for t, k in knobs.items() if k}
        picks = {t: sp.picks[t].config.code() for t in ready}
        chosen = finalists_by_bucket(screens, picks, setup.finalists, knob, echo, knob_screens, setup.knob_finalists)
        for t in [t for t in ready if not chosen[t]]:
            records.verdict(_row(sp, t, screens[t], knob_screens.get(t), [], "sglang-best", picks[t],
                                 note="no config screened within 1% of SGLang's pick: kept without an evaluation"))
        judged = {t: v for t, v in chosen.items() if v}
        if judged:
            jobs.append((name, sp, judged, screens, knob_screens))
    if not jobs:
        return
    evals = {name: _strict_s(len(judged), max(map(len, judged.values())), setup.costs) for name, _, judged, *_ in jobs}
    fitted, total = [], 0.0
    for job in sorted(jobs, key=lambda j: evals[j[0]]):  # the cheapest shapes first: as many as end in time
        if time.time() + (total + evals[job[0]]) / len(setup.gpus) <= deadline:
            fitted.append(job)
            total += evals[job[0]]
        else:
            echo(f"{job[0]}: the strict tier ({evals[job[0]]:.0f} GPU-s) would end past the deadline: left to a "
                 f"resumed run")
    if fitted:
        with ThreadPoolExecutor(len(fitted)) as ex:  # the shapes' evaluations share the GPUs' queue
            list(ex.map(lambda job: _judge_shape(setup, records, deadline, echo, *job), fitted))


def _with_unit(screen: BucketScreen, unit: UnitRow | None) -> BucketScreen:
    """The screen as the records rebuild it, with its unit's wall, GPU and compiles (the strict tier's report
    shows them; the rows alone would say 0 s)."""
    if unit is not None:
        screen.stats = screen.stats.model_copy(update={"wall_s": unit.wall_s, "gpus": [unit.gpu] if unit.gpu else [],
                                                       "compile_jobs": unit.specializations or 0})
    return screen


def _strict_s(buckets: int, ranks: int, costs: Costs) -> float:
    """GPU seconds of one shape's strict tier: one evaluation per finalist rank, then the final one."""
    return ranks * (costs.eval_fixed_s + costs.eval_bucket_s * buckets) + costs.eval_fixed_s + \
        costs.final_bucket_s * buckets


def _judge_shape(setup: TiersSetup, records: Records, deadline: float, echo, name: str, sp: ShapePlan,
                 judged: dict[int, list], screens: dict[int, BucketScreen], knob_screens: dict[int, BucketScreen]):
    buckets = sorted(judged)
    left = max(60.0, deadline - time.time())
    run_dir = setup.out / "strict" / f"{name}-{'-'.join(map(str, buckets))}"
    # a patch per call, its batch sizes tuned where they won (verdicts.jsonl holds every call's)
    options = TuneOptions(use_cache=False, patches_dir=run_dir / "patches", source_knob=setup.knob,
                          timeout_s=left, command=f"moe_tiers {name} {','.join(map(str, buckets))}")
    result = tune_fused_moe(sp.shape, buckets, run_dir, options, setup.evaluator(sp.shape), facts=setup.facts,
                            picks_at=lambda sizes: setup.picks_at(sp.shape, sizes),
                            echo=lambda text: echo(f"{name}: {text}"),
                            screened=(judged, {t: screens[t] for t in buckets}))
    final = EvalResult.model_validate_json((run_dir / "final.json").read_text())
    for b in result.buckets:
        records.verdict(_row(sp, b.tokens, screens[b.tokens], knob_screens.get(b.tokens),
                             [c.code() for c in judged[b.tokens]], b.verdict, b.chosen,
                             b.final_speedup, _interval(final, b.tokens), note=result.final_reason))


def _interval(final: EvalResult, tokens: int) -> tuple[float, float] | None:
    row = next((r for r in final.shapes if r.shape[0] == tokens and r.candidate and r.baseline), None)
    if row is None or not row.candidate.p90_us or not row.candidate.p10_us:
        return None
    return row.baseline.p10_us / row.candidate.p90_us, row.baseline.p90_us / row.candidate.p10_us


def _row(sp: ShapePlan, tokens: int, screen_: BucketScreen, knob_screen: BucketScreen | None, finalists: list[str],
         verdict: str, chosen: str, speedup: float | None = None, interval=None, note: str = "") -> VerdictRow:
    pick = sp.picks[tokens]
    best = screen_.ranked()[:1]
    order = sp.orders[tokens]
    return VerdictRow(shape=sp.name, tokens=tokens, pick=pick.config.code(), pick_source=pick.describe(),
                      space=len(order.codes) + len(order.pruned), screened=screen_.stats.screened,
                      cut=max(0, len(order.codes) - screen_.stats.screened),
                      knob_screened=knob_screen.stats.screened if knob_screen else 0,
                      screen_best=best[0].config if best else None, screen_best_us=best[0].us if best else None,
                      screen_pick_us=screen_.pick_us(pick.config.code()), finalists=finalists, verdict=verdict,
                      chosen=chosen, final_speedup=speedup,
                      interval=interval if interval and all(map(math.isfinite, interval)) else None, note=note)
