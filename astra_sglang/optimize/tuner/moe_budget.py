"""How long a fused MoE two-tier plan takes on a host (the measured costs of moe_costs.py), and which of its units
fit a deadline.

A plan is a list of units, one (shape, batch size) each, screened on one GPU: the scheduler (screen_schedule.py)
gives each free GPU the first unit in the plan's order whose compiles are far enough ahead (`moe_costs.lead`); a
source knob's unit (split-K variants of the best configs) follows its batch size's plain unit. The run's order
(`run_order`): the plain units farthest from their floor first (moe_roofline: SGLang's pick over the floor), each
knob unit right after its plain unit. The cost has three parts:
- recording: every plain unit's compiles are recorded before the first compile, in waves (an expert shape's units
  over its workers, one a GPU, the shapes side by side);
- compiles, on the CPU cores, no batch size sharing another's: the queue serves the units in the order the GPUs
  take them, `gpus` at a time, config by config (the priorities screen_schedule gives them); a knob unit's
  variants are compiled when it starts, ahead of the queue;
- the GPU, per config: the check call, a warm-up and 10 timed replays of `fitted_launches` calls (graph_timing),
  a config past 1.5x the best cut after its first replay, and a fixed overhead; then the strict tier: per shape,
  one evaluation per finalist rank, all shapes' at once on the GPUs, then each shape's final evaluation.
`simulate` runs the plan's schedule on these costs; `fit` keeps the candidates, in order, while the whole plan
ends within the deadline less a slack. An estimate decides only what a run attempts: the run itself stops
screening at its own deadline and says how much of each space it screened.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from astra_sglang.optimize.tuner.moe_costs import Costs, config_s, lead


@dataclass(frozen=True)
class Unit:
    shape: str
    tokens: int
    configs: int
    """Configs to screen (those a resumed run has not screened yet)."""
    us: float
    """SGLang's pick's screening time: what a config's GPU cost scales with."""
    knob: bool = False
    """A source knob's variants: compiled when the unit starts (its own kernels), after its plain unit."""
    gap: float = 1.0
    """SGLang's pick's time over the floor (moe_roofline): the farthest from it are screened first."""
    compile_factor: float = 1.0
    """A config's compile over a bf16 config's (Costs.fp8_compile_factor for an fp8_w8a8 shape)."""

    @property
    def name(self) -> str:
        return f"{self.shape}@{self.tokens}{'+knob' if self.knob else ''}"


@dataclass(frozen=True)
class Strict:
    """The strict tier's shape: finalists per batch size (plain, and a knob's at its batch sizes), and the batch
    sizes of each shape's final evaluation beyond those screened now (a resumed plan's earlier ones)."""

    finalists: int = 2
    knob_finalists: int = 2
    earlier: dict[str, int] = field(default_factory=dict)


@dataclass
class Placed:
    unit: Unit
    gpu: int
    start_s: float
    end_s: float
    screened: int


@dataclass
class Timeline:
    placed: list[Placed] = field(default_factory=list)
    compile_s: float = 0.0
    """When the last plain unit's compiles end."""
    screen_s: float = 0.0
    strict_s: float = 0.0
    evaluations: int = 0

    @property
    def end_s(self) -> float:
        return self.strict_s


def run_order(units: list[Unit]) -> list[Unit]:
    """The plain units farthest from their floor first (ties: smaller batch sizes, then the shape), each knob unit
    right after its plain unit."""
    plain = sorted((u for u in units if not u.knob), key=lambda u: (-u.gap, u.tokens, u.shape))
    knobs = {(u.shape, u.tokens): u for u in units if u.knob}
    out = []
    for u in plain:
        out.append(u)
        if (u.shape, u.tokens) in knobs:
            out.append(knobs.pop((u.shape, u.tokens)))
    return out + list(knobs.values())


def recording_s(units: list[Unit], gpus: int, costs: Costs) -> float:
    """Recording every plain unit's compiles: an expert shape's units over its workers (one a GPU), in waves."""
    plain = [u for u in units if not u.knob]
    waves = max((math.ceil(n / gpus) for n in Counter(u.shape for u in plain).values()), default=0)
    return waves * (costs.prepare_s + costs.record_s * max((u.configs for u in plain), default=0))


def compile_windows(units: list[Unit], gpus: int, begin: float, per_config: float) -> dict[str, tuple[float, float]]:
    """Per plain unit: when its first compile starts and the seconds between its compiled configs. The queue serves
    the units `gpus` at a time in the order the GPUs take them, a wave's units config by config."""
    plain = [u for u in units if not u.knob]
    out, t = {}, begin
    for i in range(0, len(plain), gpus):
        wave = plain[i:i + gpus]
        for u in wave:
            out[u.name] = (t, per_config * sum(w.compile_factor for w in wave))
        t += per_config * sum(u.configs * u.compile_factor for u in wave)
    return out


def _screened_by(t0: float, a: float, b: float, c: float, n: int, until: float) -> int:
    """Configs done by `until`: config i is ready at a + b (i + 1), the GPU takes c each from t0."""
    if until == math.inf:
        return n
    bounds = [(until - t0) / c, (until - a - b) / c] + ([(until - a - c) / b] if b > 0 else [])
    return max(0, min(n, math.floor(min(bounds) + 1e-9)))


def simulate(units: list[Unit], gpus: int, cores: int, costs: Costs = Costs(), strict: Strict = Strict(),
             screen_until: float = math.inf) -> Timeline:
    """The plan's schedule (`units` in the run's order) on `gpus` GPUs and `cores` compile processes; screening
    stops at `screen_until`."""
    per_config = costs.config_compile_s / max(cores, 1)
    begin = costs.start_s + recording_s(units, gpus, costs)
    windows = compile_windows(units, gpus, begin + costs.compile_start_s, per_config)
    timeline = Timeline(compile_s=begin + costs.compile_start_s + per_config * sum(
        u.configs * u.compile_factor for u in units if not u.knob))
    free = [begin] * gpus
    ends: dict[tuple, float] = {}
    pending = list(units)
    while pending:
        g = min(range(gpus), key=free.__getitem__)
        ready = [u for u in pending if not u.knob or ends.get((u.shape, u.tokens), math.inf) <= free[g]]
        # a knob unit waits for its plain unit; a GPU with nothing else left waits for the first such
        unit = ready[0] if ready else min(pending, key=lambda u: ends.get((u.shape, u.tokens), math.inf))
        pending.remove(unit)
        c = config_s(unit.us, costs)
        if unit.knob:  # its variants are recorded and compiled when it starts, ahead of the queue
            start = max(free[g], ends.get((unit.shape, unit.tokens), 0.0))
            t0 = start + costs.prepare_s + costs.record_s * unit.configs
            a, b = t0, per_config
        else:  # started once enough of its configs are compiled (screen_schedule's gate)
            a, b = windows[unit.name]
            start = max(free[g], a + lead(unit.configs, c, b) * b)
            t0 = start + costs.prepare_s
        n = _screened_by(t0, a, b, c, unit.configs, screen_until) if start < screen_until else 0
        end = max(t0 + n * c, a + b + n * c, a + b * n + c) if n else min(start, screen_until)
        free[g] = end
        if not unit.knob:
            ends[(unit.shape, unit.tokens)] = end
        timeline.placed.append(Placed(unit, g, start, end, n))
    timeline.screen_s = max(free)
    _strict(timeline, gpus, costs, strict)
    return timeline


def _strict(timeline: Timeline, gpus: int, costs: Costs, strict: Strict) -> None:
    """The strict tier after the screening: every shape's round evaluations at once, longest first, then each
    shape's final evaluation once its round is done."""
    shapes: dict[str, set[int]] = {}
    knobs: dict[str, set[int]] = {}
    for p in timeline.placed:
        if p.screened:
            (knobs if p.unit.knob else shapes).setdefault(p.unit.shape, set()).add(p.unit.tokens)
    jobs = []
    for shape, buckets in shapes.items():
        knob = knobs.get(shape, set())
        for rank in range(strict.finalists + (strict.knob_finalists if knob else 0)):
            covered = len(buckets) if rank < strict.finalists else len(knob)
            jobs.append((costs.eval_fixed_s + costs.eval_bucket_s * covered, shape))
    free = [timeline.screen_s] * gpus
    done: dict[str, float] = {}
    for seconds, shape in sorted(jobs, reverse=True):
        g = min(range(gpus), key=free.__getitem__)
        free[g] += seconds
        done[shape] = max(done.get(shape, 0.0), free[g])
    for shape, buckets in shapes.items():
        g = min(range(gpus), key=free.__getitem__)
        free[g] = max(free[g], done.get(shape, timeline.screen_s)) + costs.eval_fixed_s + \
            costs.final_bucket_s * (len(buckets) + strict.earlier.get(shape, 0))
    timeline.evaluations = len(jobs) + len(shapes)
    timeline.strict_s = max(free) if shapes else timeline.screen_s


@dataclass
class Fit:
    chosen: list[Unit]
    """In the run's order."""
    deferred: list[Unit]
    timeline: Timeline


def fit(candidates: list[Unit], deadline_s: float, gpus: int, cores: int, costs: Costs = Costs(),
        strict: Strict = Strict()) -> Fit:
    """As many of `candidates` (tried in their order; a knob unit only with its plain unit) as end, run in the
    run's order with the strict tier after them, within `deadline_s` less the slack: every unit planned is
    screened whole by the estimate."""
    budget = deadline_s * (1.0 - costs.slack)
    chosen: list[Unit] = []
    deferred: list[Unit] = []
    for unit in candidates:
        if unit.knob and not any(u.shape == unit.shape and u.tokens == unit.tokens for u in chosen):
            deferred.append(unit)
        elif simulate(run_order(chosen + [unit]), gpus, cores, costs, strict).end_s <= budget:
            chosen.append(unit)
        else:
            deferred.append(unit)
    chosen = run_order(chosen)
    return Fit(chosen, deferred, simulate(chosen, gpus, cores, costs, strict))
