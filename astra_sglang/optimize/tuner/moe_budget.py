"""How long a fused MoE two-tier plan takes on a host, from measured costs, and which of its units fit a deadline.

A plan is a list of units, one (shape, batch size) each, screened on one GPU (the scheduler, screen_schedule.py,
gives each free GPU the next unit in the plan's order); a source knob's unit (split-K variants of the best configs)
follows its batch size's plain unit. The cost has three parts:
- compiles ahead, on the CPU cores, each specialization once. The integer arguments of fused MoE's kernel that vary
  with the batch size (the padded row count of moe_align_block_size's buffer, the token slots) specialize on == 1
  and divisibility by 16, so a shape's batch sizes fall into 2-3 classes (`specialization`) that share every
  compiled kernel. Each class is compiled once, ahead of the screening, in the order its units come.
- the GPU, per config: the check call, a warm-up and 10 timed replays of `fitted_launches` calls (graph_timing),
  a config past 1.5x the best cut after its first replay, and a fixed overhead (the worker's round trip, the
  capture); a config that does not fit in shared memory costs the overhead only.
- the strict tier: per shape, one evaluation per finalist rank, all shapes' at once on the GPUs, then each shape's
  final evaluation.
`simulate` runs the plan's schedule on these costs (a config waits for its compiles); `fit` keeps the units in
order while the whole plan ends by the deadline. An estimate decides only what a run attempts: the run itself
stops screening at its own deadline and says how much of each space it screened.

`Costs` and `REFERENCE_US` hold what was measured on 4x H200 (2026-11-27, commit ff157ed,
`ASTRA_COMMIT=ff157ed DEADLINE=350 bash benchmarks/gpu/moe_screen.sh OUT`, benchmarks/results/2026-11-27-h200/
moe-screen/); a field that is an assumption says so.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from astra_sglang.optimize.tuner.graph_timing import fitted_launches
from astra_sglang.optimize.tuner.moe_order import gpu_model

REFERENCE_GPU = "NVIDIA H200"
REFERENCE_US = {
    (128, 768, 2048, 8): {1: 54.1, 16: 250.0, 64: 382.7, 256: 420.3, 1024: 517.9, 4096: 1072.9},
    (8, 14336, 4096, 2): {1: 253.7, 16: 757.8, 64: 874.0, 256: 1045.9, 1024: 2176.5, 4096: 7523.8},
}
"""SGLang's shipped pick per expert shape (experts, N, hidden, top-k; bf16) and batch size: the strict evaluator's
median in the final evaluations of the run above (its tune-qwen3/final.json and tune-mixtral/final.json, not
committed; the final speedups in its tiers.jsonl are theirs)."""
BLOCK_MS = (16, 32, 64, 128, 256)
"""SGLang's tuning space's BLOCK_SIZE_M values: the padded row count depends on it."""


@dataclass(frozen=True)
class Costs:
    start_s: float = 36.0
    """Workers up (SGLang imported, weights drawn) and a first batch size prepared (bench.log: 36 s)."""
    prepare_s: float = 3.0
    """A batch size's inputs, routings and fp32 reference on a worker (the tiers' first results came 2.4-3.6 s into
    a batch size, its recording and first compile included)."""
    record_s: float = 0.0012
    """Recording one config's compiles (the cold phase's first result 2.7 s after its start: 1,504 recorded, one
    compiled)."""
    compile_cpu_s: float = 0.933
    """CPU seconds a specialization (cold phase: 2,805 CPU-s for 3,006, 30 processes on a 64-core host)."""
    jobs_per_config: int = 2
    """Fused MoE's two GEMMs."""
    overhead_s: float = 0.009
    """A config's GPU-side cost besides its calls: warm1's 41 ms a config at batch 64 less 111 calls of its 291 us."""
    done_share: float = 0.72
    """Configs timed in full, of those timed (cold phase: 954 of 1,320; the flattest landscape, so the dearest)."""
    load_share: float = 0.12
    """Configs that fail at load (cold phase: 184 of 1,504 need more shared memory than the GPU has)."""
    done_factor: float = 1.15
    """Assumed: a config timed in full runs at this x SGLang's pick on average (it is within 1.5x of the best)."""
    slow_factor: float = 2.0
    """Assumed: a config cut after one replay runs at this x SGLang's pick on average (past 1.5x the best)."""
    eval_fixed_s: float = 27.0
    eval_bucket_s: float = 3.0
    final_bucket_s: float = 5.0
    """A strict evaluation: ~45 s for a round's of 6 batch sizes, 55-58 s for a final's (final-*.json wall_s);
    the split into a fixed part and a part per batch size is assumed."""
    replays: int = 10
    warmup: int = 1


def padded_rows(tokens: int, experts: int, topk: int, block_m: int) -> int:
    """The sorted-token buffer SGLang's moe_align_block_size allocates (the kernel's EM argument)."""
    slots = tokens * topk
    if slots < experts + 1:
        return slots * block_m
    return slots + (experts + 1) * (block_m - 1)


def _int_attrs(value: int) -> tuple[bool, bool]:
    return value == 1, value % 16 == 0


def specialization(shape: tuple[int, int, int, int], tokens: int) -> tuple:
    """What Triton specializes on at this batch size (batch sizes with equal values share compiled kernels)."""
    experts, _, _, topk = shape
    rows = tuple(_int_attrs(padded_rows(tokens, experts, topk, m)) for m in BLOCK_MS)
    return rows, _int_attrs(tokens * topk)


def call_us(shape: tuple[int, int, int, int], tokens: int, gpu: str) -> float:
    """SGLang's pick's time at `tokens`: the reference's, interpolated in log-log between its batch sizes (the end
    slopes beyond), scaled by memory bandwidth to another GPU; a shape without a reference gets the cost model's
    best prediction over SGLang's space."""
    table = REFERENCE_US.get(tuple(shape))
    if table is None:
        from astra_sglang.optimize.tuner.moe_order import predict_us
        from astra_sglang.triton.moe.shapes import MoeShape
        from astra_sglang.triton.moe.space import SPACES

        s = MoeShape(*shape)
        return min(predict_us(c, tokens, s, gpu_model(gpu)) for c in SPACES["sglang"]())
    keys = sorted(table)
    lo = max([k for k in keys if k <= tokens] or keys[:1])
    i = min(keys.index(lo), len(keys) - 2)
    a, b = keys[i], keys[i + 1]
    slope = math.log(table[b] / table[a]) / math.log(b / a)
    us = table[a] * (tokens / a) ** slope
    return us * gpu_model(REFERENCE_GPU).bandwidth / gpu_model(gpu).bandwidth


def config_s(us: float, costs: Costs) -> float:
    """Mean GPU seconds a config takes to screen where SGLang's pick runs in `us`."""
    done_us, slow_us = us * costs.done_factor, us * costs.slow_factor
    calls = fitted_launches(us)  # fitted once a batch size, to SGLang's pick
    done = (1 + (costs.warmup + costs.replays) * calls) * done_us * 1e-6
    slow = (1 + (costs.warmup + 1) * calls) * slow_us * 1e-6
    timed = costs.done_share * done + (1 - costs.done_share) * slow
    return costs.overhead_s + (1 - costs.load_share) * timed


@dataclass(frozen=True)
class Unit:
    shape: str
    tokens: int
    configs: int
    """Configs to screen (those a resumed run has not screened yet)."""
    spec: tuple
    """The specialization class (units with one share their compiles)."""
    us: float
    """SGLang's pick's time (call_us): what a config's GPU cost scales with."""
    knob: bool = False
    """A source knob's variants: compiled when the unit starts (its own kernels), after its plain unit."""

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
    """When the last class finished compiling."""
    screen_s: float = 0.0
    strict_s: float = 0.0
    evaluations: int = 0

    @property
    def end_s(self) -> float:
        return self.strict_s


def _screened_by(t0: float, a: float, b: float, c: float, n: int, until: float) -> int:
    """Configs done by `until`: config i is ready at a + b (i + 1), the GPU takes c each from t0."""
    if until == math.inf:
        return n
    bounds = [(until - t0) / c, (until - a - b) / c] + ([(until - a - c) / b] if b > 0 else [])
    return max(0, min(n, math.floor(min(bounds) + 1e-9)))


def simulate(units: list[Unit], gpus: int, cores: int, costs: Costs = Costs(), strict: Strict = Strict(),
             screen_until: float = math.inf) -> Timeline:
    """The plan's schedule on `gpus` GPUs and `cores` compile processes; screening stops at `screen_until`."""
    rate = cores / costs.compile_cpu_s
    size: dict[tuple, int] = {}
    for u in units:
        if not u.knob:
            size[(u.shape, u.spec)] = max(size.get((u.shape, u.spec), 0), u.configs)
    per_shape: dict[str, int] = {}
    for shape, _ in size:
        per_shape[shape] = per_shape.get(shape, 0) + 1
    # each shape's classes recorded at once on its workers (one a GPU), the shapes side by side
    rounds = max((math.ceil(n / gpus) for n in per_shape.values()), default=0)
    prefetch = rounds * (costs.prepare_s + costs.record_s * max(size.values(), default=0))
    t = costs.start_s + prefetch
    classes: dict[tuple, tuple[float, float]] = {}
    for key, n in size.items():  # in plan order: dicts keep the first appearance's order
        dur = n * costs.jobs_per_config / rate
        classes[key] = (t, dur / max(n, 1))
        t += dur
    timeline = Timeline(compile_s=t)
    queue_end, free = t, [costs.start_s + prefetch] * gpus
    ends: dict[tuple, float] = {}
    pending = list(units)
    while pending:
        g = min(range(gpus), key=free.__getitem__)
        ready = [u for u in pending if not u.knob or ends.get((u.shape, u.tokens), math.inf) <= free[g]]
        # a knob unit waits for its plain unit; a GPU with nothing else left waits for the first such
        unit = ready[0] if ready else min(pending, key=lambda u: ends.get((u.shape, u.tokens), math.inf))
        start = max(free[g], ends.get((unit.shape, unit.tokens), 0.0) if unit.knob else 0.0)
        pending.remove(unit)
        c = config_s(unit.us, costs)
        t0 = start + costs.prepare_s + costs.record_s * unit.configs
        if unit.knob:
            a = max(t0, queue_end)
            b = costs.jobs_per_config / rate
            queue_end = a + b * unit.configs
        else:
            a, b = classes[(unit.shape, unit.spec)]
        n = _screened_by(t0, a, b, c, unit.configs, screen_until) if start < screen_until else 0
        end = max(t0 + n * c, a + b + n * c, a + b * n + c) if n else min(start, screen_until)
        free[g] = end
        if not unit.knob:
            ends[(unit.shape, unit.tokens)] = end
        timeline.placed.append(Placed(unit, g, start, end, n))
    timeline.screen_s = max(free)
    _strict(timeline, units, gpus, costs, strict)
    return timeline


def _strict(timeline: Timeline, units: list[Unit], gpus: int, costs: Costs, strict: Strict) -> None:
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
    deferred: list[Unit]
    timeline: Timeline


def fit(core: list[Unit], extra: list[Unit], deadline_s: float, gpus: int, cores: int, costs: Costs = Costs(),
        strict: Strict = Strict()) -> Fit:
    """The core units and as many of `extra` (in order; a knob unit only with its plain unit) as end by
    `deadline_s`, all screening stopped where the strict tier's estimate must start."""
    chosen, deferred = list(core), []
    for unit in extra:
        trial = chosen + [unit]
        if unit.knob and not any(u.shape == unit.shape and u.tokens == unit.tokens for u in chosen):
            deferred.append(unit)
        elif simulate(trial, gpus, cores, costs, strict).end_s <= deadline_s:
            chosen = trial
        else:
            deferred.append(unit)
    return Fit(chosen, deferred, simulate(chosen, gpus, cores, costs, strict))
