"""The plan of a two-tier run over several fused MoE expert shapes and every GPU of a host: which (shape, batch size)
units are screened, in what order, and which are left to a later (resumed) run.

Per shape and batch size, the unit screens SGLang's whole tuning space in the screening order (moe_order: SGLang's
pick, the shipped configs, the rest by the cost model; what cannot fit in shared memory dropped), less what the
records hold screened already (a resumed run: its pick is screened again, as this run's bar). At the knob's batch
sizes, a second unit follows the plain one: the source knob's variants (split-K) of SGLang's pick and of the `top`
fastest plain configs screened there (moe_two_tier.knob_variants).

The order (moe_budget.run_order): the units where SGLang's pick runs farthest from its floor first (moe_roofline:
the pick's time, the records' or moe_costs.call_us's, over the floor), so the tiers point at batch sizes where a
config can still gain. `core` batch sizes are tried first, then the `extra` ones, each set in that order; a unit
joins while moe_budget's estimate of the whole run, the strict tier included, ends within the deadline less its
slack; the rest are deferred, for a resumed run. Each unit's `lead` (moe_costs.lead) is how many of its configs
the compile processes must have compiled before a GPU starts it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import partial
from typing import Callable

from astra_sglang.optimize.tuner.cache import ScreenCache, ScreenKey
from astra_sglang.optimize.tuner.moe_budget import Fit, Strict, Unit, compile_windows, fit, run_order
from astra_sglang.optimize.tuner.moe_costs import Costs, call_us, config_s, lead
from astra_sglang.optimize.tuner.moe_knob_tune import keyed_hash
from astra_sglang.optimize.tuner.moe_order import gpu_model, ordered
from astra_sglang.optimize.tuner.moe_roofline import floor
from astra_sglang.optimize.tuner.moe_two_tier import knob_variants
from astra_sglang.optimize.tuner.order import Ordered
from astra_sglang.optimize.tuner.screen_schedule import ScreenUnit
from astra_sglang.triton.moe.configs import Pick
from astra_sglang.triton.moe.provider import KernelSourceProvider
from astra_sglang.triton.moe.shapes import MoeShape
from astra_sglang.triton.screen_records import Screened

KNOB_TOP = 32
"""Plain configs (the fastest screened) whose knob variants are screened, besides SGLang's pick."""


@dataclass
class ShapePlan:
    name: str
    shape: MoeShape
    picks: dict[int, Pick]
    orders: dict[int, Ordered]
    known: dict[int, dict[str, Screened]] = field(default_factory=dict)
    """What the screen cache holds per batch size (an earlier run's)."""
    knob_known: dict[int, dict[str, Screened]] = field(default_factory=dict)
    knob_tokens: list[int] = field(default_factory=list)

    def key(self, tokens: int, facts, knob: KernelSourceProvider | None = None) -> ScreenKey:
        source = keyed_hash(facts.source_hash, knob) if knob else facts.source_hash
        return ScreenKey(gpu=facts.gpu, triton=facts.triton, source_hash=source, shape=self.shape.shape(tokens),
                         dtype=self.shape.precision)

    def todo(self, tokens: int) -> list[str]:
        """The order less what is known, SGLang's pick first whenever anything is left."""
        known = self.known.get(tokens, {})
        left = [c for c in self.orders[tokens].codes if c not in known]
        pick = self.picks[tokens].config.code()
        return ([pick] if left and pick not in left else []) + left


@dataclass
class Plan:
    shapes: dict[str, ShapePlan]
    units: list[ScreenUnit]
    """In order: what the run screens (the plain ones' compiles recorded and queued ahead)."""
    fit: Fit
    knob: KernelSourceProvider | None
    deferred: list[Unit] = field(default_factory=list)
    done: list[str] = field(default_factory=list)
    """Units an earlier run screened whole: nothing left to do."""


def shape_plan(name: str, shape: MoeShape, picks: dict[int, Pick], gpu: str, smem: int, facts,
               cache: ScreenCache | None, knob: KernelSourceProvider | None, knob_tokens: list[int]) -> ShapePlan:
    model = gpu_model(gpu, smem)
    plan = ShapePlan(name, shape, picks, {t: ordered(shape, t, p.config, model, prune=None) for t, p in picks.items()},
                     knob_tokens=[t for t in knob_tokens if t in picks])
    if cache:
        plan.known = {t: cache.lookup(plan.key(t, facts)) for t in picks}
        if knob:
            plan.knob_known = {t: cache.lookup(plan.key(t, facts, knob)) for t in plan.knob_tokens}
    return plan


def _knob_configs(sp: ShapePlan, tokens: int, knob: KernelSourceProvider, top: int,
                  screened: list[Screened]) -> list[str]:
    """The knob unit's configs from its plain unit's results (and the cache's), less the knob's known ones."""
    merged = list(sp.known.get(tokens, {}).values()) + list(screened)
    codes = knob_variants(merged, sp.picks[tokens].config, knob, tokens, sp.shape, top)
    known = sp.knob_known.get(tokens, {})
    return [c for c in codes if c not in known]


def pick_us(sp: ShapePlan, tokens: int, gpu: str) -> float:
    """SGLang's pick's screening time: the records' (an earlier run screened it), else moe_costs.call_us's."""
    known = sp.known.get(tokens, {}).get(sp.picks[tokens].config.code())
    if known is not None and known.ok and known.us:
        return known.us
    return call_us((sp.shape.experts, sp.shape.inter, sp.shape.hidden, sp.shape.topk), tokens, gpu)


def _estimate(sp: ShapePlan, tokens: int, knob: KernelSourceProvider | None, top: int, gpu: str,
              costs: Costs = Costs()) -> Unit:
    us = pick_us(sp, tokens, gpu)
    gap = us / floor(sp.shape, tokens, gpu).us
    if knob is None:
        return Unit(sp.name, tokens, len(sp.todo(tokens)), us, gap=gap,
                    compile_factor=costs.fp8_compile_factor if sp.shape.quantized else 1.0)
    order = sp.orders[tokens]
    codes = knob_variants([Screened(config=c, bucket=tokens, stage="done", us=float(i))
                           for i, c in enumerate(order.codes[1:top + 1])],
                          sp.picks[tokens].config, knob, tokens, sp.shape, top)
    count = len([c for c in codes if c not in sp.knob_known.get(tokens, {})])
    return Unit(sp.name, tokens, count, us, knob=True, gap=gap)


def make_plan(shapes: dict[str, ShapePlan], core: list[int], extra: list[int], facts, gpus: int, cores: int,
              deadline_s: float, knob: KernelSourceProvider | None = None, top: int = KNOB_TOP,
              costs: Costs = Costs(), strict: Strict = Strict()) -> Plan:
    def units_at(tokens_list: list[int]) -> list[Unit]:
        out = []
        for t in tokens_list:
            for sp in shapes.values():
                if t not in sp.picks:
                    continue
                out.append(_estimate(sp, t, None, top, facts.gpu, costs))
                if knob and t in sp.knob_tokens:
                    out.append(_estimate(sp, t, knob, top, facts.gpu, costs))
        return [u for u in out if u.configs]  # a knob with no split worth measuring there has no unit

    done = [f"{sp.name}@{t}" for sp in shapes.values() for t in sp.picks if not sp.todo(t)]
    earlier = {name: sum(1 for d in done if d.startswith(name + "@")) for name in shapes}
    strict = Strict(strict.finalists, strict.knob_finalists, earlier)
    fitted = fit(run_order(units_at(core)) + run_order(units_at(extra)), deadline_s, gpus, cores, costs, strict)
    windows = compile_windows(fitted.chosen, gpus, 0.0, costs.config_compile_s / max(cores, 1))
    units = []
    for u in fitted.chosen:
        sp = shapes[u.shape]
        if u.knob:
            units.append(ScreenUnit(u.name, u.shape, u.tokens, partial(_knob_configs, sp, u.tokens, knob, top),
                                    after=f"{u.shape}@{u.tokens}"))
        else:
            ahead = lead(u.configs, config_s(u.us, costs), windows[u.name][1])
            units.append(ScreenUnit(u.name, u.shape, u.tokens, sp.todo(u.tokens), lead=ahead))
    return Plan(shapes, units, fitted, knob, fitted.deferred, done)


def least_deadline(left_s: float, plan_for: Callable[[float], Plan], short: Callable[[Plan], list[str]],
                   most_s: float = 86400.0) -> str:
    """The words for the least deadline (to 10 s) whose plan defers none of the required units: doubled, then
    halved back (the plan fits more as the deadline grows)."""
    high = max(left_s, 10.0) * 2
    while short(plan_for(high)):
        if high >= most_s:
            return f"it does not fit even in {most_s:.0f} s"
        high *= 2
    low = left_s
    while high - low > 1:
        mid = (low + high) / 2
        low, high = (mid, high) if short(plan_for(mid)) else (low, mid)
    fits = math.ceil(high / 10) * 10
    return f"it fits with {fits} s left (raise the deadline by {fits - left_s:.0f} s)"
