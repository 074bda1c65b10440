"""The op timed where it runs in the model: GEMM -> op -> GEMM in one CUDA graph, beside the isolated figure.

Isolated timing replays the op back to back: with programmatic dependent launch each launch overlaps the one
before, and its inputs are the only traffic, a best case a server never gives (the op follows a GEMM that has
just streamed its weights through the L2 and written the op's input). Here each repeat of a replay is

    gemm_before(A, W_before) -> the op's input      (the layer the spec's `sandwich.before` names)
    the op                                          (the candidate's, or the baseline's)
    gemm_after(the op's output, W_after)            (`sandwich.after`)

with torch.mm (cuBLAS, as SGLang's linear layers run) launched as SGLang launches them, the op's own launcher
unchanged (PDL where it launches with PDL, on both sides, after a GEMM that does not), and the L2 as the
GEMMs leave it. Three graphs are replayed interleaved: the sandwich with the candidate, with the baseline,
and the GEMMs alone; the op's share is the sandwich minus the GEMMs alone, round by round, and the speedup
the median of the baseline's share over the candidate's. Each repeat has its own argument set; before every
replay in-place arguments are restored, one element of A changed (a row of every GEMM output, so no launch can
compute a later repeat's work early), and the outputs given a random pre-state; the candidate's last replay
is checked as it left every set.
"""
from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass

import torch

from astra_sglang.harness import draw, prestate
from astra_sglang.harness.budget import MemoryLedger
from astra_sglang.harness.compare import compare
from astra_sglang.harness.inputs import OpArgs, allocate, fill
from astra_sglang.harness.records import SandwichTiming
from astra_sglang.harness.timed_run import timed_replay
from astra_sglang.harness.timing import capture, rounds, summarize
from astra_sglang.specs.exprs import eval_dim
from astra_sglang.specs.records import Argument, KernelSpec
from astra_sglang.specs.registry import ModelConfig, model_for

REPLAY_US = 2000.0
"""One replay lasts about this long (the GEMMs dominate it): enough repeats that the op's share is many
launches' worth."""
MAX_REPEATS = 32
A_OPERAND = Argument(name="a")
"""The GEMM before's activations, drawn normal: one element of them changes before every replay."""
REPLAYS, WARMUP, WARMUP_S = 30, 3, 0.2
"""More recorded rounds than the isolated timing's 20: the op's share is a difference of two larger times."""
UNRESOLVED_ROUNDS = 0.1
"""Above this fraction of rounds where either op's share (sandwich minus GEMMs alone) is not positive, the
in-place speedup is not resolved (None): the evaluator then judges on the isolated figure."""


@dataclass(frozen=True)
class Gemm:
    name: str
    m: int
    k: int
    n: int

    def describe(self) -> str:
        return f"{self.name} {self.m}x{self.k}x{self.n}"


def gemms(spec: KernelSpec, shape: tuple[int, ...], model: ModelConfig) -> tuple[Gemm, Gemm]:
    """The GEMM before (its [m, n] output is the op's `before.arg`) and after (its [m, k] input is `after.arg`)."""
    fields = {f: getattr(model, f) for f in ("hidden", "intermediate", "heads", "kv_heads", "head_dim")}
    by_name = {a.name: a for a in spec.tensor_args}

    def view(arg: str) -> tuple[int, int]:
        dims = spec.arg_shape(by_name[arg], shape)
        return dims[0], math.prod(dims[1:])

    side = spec.sandwich
    m, n = view(side.before.arg)
    before = Gemm(side.before.name, m, eval_dim(side.before.width, fields), n)
    m, k = view(side.after.arg)
    return before, Gemm(side.after.name, m, k, eval_dim(side.after.width, fields))


class Sandwich:
    """`capture` and `replay` default to CUDA graphs; CPU tests hand in stand-ins (as TimedRun takes them)."""

    def __init__(self, spec: KernelSpec, shape: tuple[int, ...], dtype: str, device, model: ModelConfig,
                 ledger: MemoryLedger | None = None, capture=capture, replay=timed_replay):
        self.spec, self.shape, self.dtype, self.device, self.model = spec, tuple(shape), dtype, device, model
        self.ledger, self.capture, self.replay = ledger, capture, replay
        self.before, self.after = gemms(spec, self.shape, model)
        self.index = {a.name: i for i, a in enumerate(spec.tensor_args)}
        self.torch_dtype = draw.dtype_of(spec.tensor_args[self.index[spec.sandwich.before.arg]], dtype)

    @classmethod
    def for_shape(cls, spec: KernelSpec, shape, dtype: str, device, ledger: MemoryLedger | None = None):
        """None where the spec names no neighbours or no model config has the shape's dims."""
        model = model_for(spec, tuple(shape)) if spec.sandwich else None
        return cls(spec, shape, dtype, device, model, ledger) if model else None

    # -- the buffers ---------------------------------------------------------------------------------------
    def _operands(self, gen: torch.Generator) -> None:
        b, a, t = self.before, self.after, self.torch_dtype
        self.a = torch.randn(b.m, b.k, generator=gen, device=self.device).to(t)
        self.w_before = (torch.randn(b.n, b.k, generator=gen, device=self.device) / math.sqrt(b.k)).to(t)
        self.w_after = (torch.randn(a.n, a.k, generator=gen, device=self.device) / math.sqrt(a.k)).to(t)
        self.c_after = torch.empty(a.m, a.n, dtype=t, device=self.device)

    def _sets(self, count: int, gen: torch.Generator) -> None:
        self.sets = [fill(self.spec, allocate(self.spec, self.shape, self.dtype, self.device, guard=False), gen)
                     for _ in range(count)]
        written = self.index[self.spec.sandwich.before.arg]
        self.restore = {i: [s.tensors[i].clone() for s in self.sets] for i, arg in enumerate(self.spec.tensor_args)
                        if arg.role == "inplace" and i != written}

    def repeat_bytes(self) -> int:
        return 2 * self.spec.call_bytes(self.shape, self.dtype)  # a set and the copies restored from

    def fixed_bytes(self) -> int:
        b, a = self.before, self.after
        return (b.m * b.k + b.n * b.k + a.n * a.k + a.m * a.n) * self.torch_dtype.itemsize

    # -- the graphs ----------------------------------------------------------------------------------------
    def _gemm_before(self, i: int) -> None:
        out = self.sets[i].tensors[self.index[self.spec.sandwich.before.arg]]
        torch.mm(self.a, self.w_before.t(), out=out.view(self.before.m, self.before.n))

    def _gemm_after(self, i: int) -> None:
        src = self.sets[i].tensors[self.index[self.spec.sandwich.after.arg]]
        torch.mm(src.view(self.after.m, self.after.k), self.w_after.t(), out=self.c_after)

    def _launcher(self, op):
        def launch(i: int) -> int:
            self._gemm_before(i)
            code = op(self.sets[i]) if op else 0
            self._gemm_after(i)
            return code
        return launch

    def prepare(self, rng: random.Random, gen: torch.Generator) -> None:
        if self._change is not None:
            self._change.undo(self.a.unsqueeze(0))
        self._change = draw.perturb_rows(A_OPERAND, self.a.unsqueeze(0), gen, {})
        for i, drawn in self.restore.items():
            for s, d in zip(self.sets, drawn):
                s.tensors[i].copy_(d)
        kind = rng.choice(prestate.KINDS)
        for s in self.sets:
            prestate.prepare(self.spec, s.tensors, kind, gen)

    # -- the run -------------------------------------------------------------------------------------------
    def run(self, candidate, baseline, rng: random.Random, replays: int = REPLAYS, warmup: int = WARMUP,
            warmup_s: float = WARMUP_S) -> tuple[SandwichTiming | None, str]:
        """The timing, or None and why the candidate's checked replay left a set wrong."""
        gen = torch.Generator(device=self.device).manual_seed(rng.randrange(1 << 30))
        self._operands(gen)
        self._change = None
        self._sets(1, gen)
        probe = self.capture(self._launcher(None), [0])
        gemm_us = min(self.replay(probe)[0] for _ in range(4))
        del probe  # it launches into set 0, which the sets below replace
        count = int(min(MAX_REPEATS, max(2, -(-REPLAY_US // max(gemm_us, 1.0)))))
        if self.ledger is not None:
            free, fixed, each = torch.cuda.mem_get_info(self.device)[0], self.fixed_bytes(), self.repeat_bytes()
            grant = self.ledger.grant(fixed + count * each, free, least=fixed + 2 * each)
            count = max(2, min(count, (grant - fixed) // each))
        self._sets(count, gen)
        order = rng.sample(range(count), count)
        graphs = {"candidate": self.capture(self._launcher(candidate), order),
                  "baseline": self.capture(self._launcher(baseline), order),
                  "gemms": self.capture(self._launcher(None), order)}

        def replay(name: str):
            def go(_r: int) -> float:
                self.prepare(rng, gen)
                return self.replay(graphs[name])[0] / count
            return go

        samples = rounds({name: replay(name) for name in graphs}, replays, warmup, warmup_s)
        self.prepare(rng, gen)
        self.replay(graphs["candidate"])
        wrong = self.check_left(order)
        if self.ledger is not None:
            self.ledger.release()
        if wrong:
            return None, wrong
        return self.figures(samples, count), ""

    def figures(self, samples: dict[str, list[float]], count: int) -> SandwichTiming:
        cand, base, alone = samples["candidate"], samples["baseline"], samples["gemms"]
        op_c = [c - g for c, g in zip(cand, alone)]
        op_b = [b - g for b, g in zip(base, alone)]
        ratios = [b / c for b, c in zip(op_b, op_c) if c > 0 and b > 0]
        if len(ratios) < (1 - UNRESOLVED_ROUNDS) * len(op_c):
            # The GEMMs' round-to-round spread is as large as the op: the surviving rounds would be a biased
            # sample (a 0.70 us op minus a 75 us GEMM pair gave -0.33 us and "7.9x" on an H200). No figure.
            ratios = []
        return SandwichTiming(
            model=self.model.name, before=self.before.describe(), after=self.after.describe(), repeats=count,
            gemms_us=summarize(alone), candidate_us=summarize(cand), baseline_us=summarize(base),
            op_candidate_us=statistics.median(op_c), op_baseline_us=statistics.median(op_b),
            speedup=statistics.median(ratios) if ratios else None,
            saved_us=statistics.median(b - c for b, c in zip(base, cand)))

    def check_left(self, order: list[int]) -> str:
        """'' when every set holds the op's result on what the GEMM before wrote (recomputed eagerly)."""
        torch.cuda.synchronize()
        reference = self.spec.reference_fn()
        written = self.index[self.spec.sandwich.before.arg]
        overwritten = self.spec.tensor_args[written].role == "inplace"
        for position, i in enumerate(order):
            s = self.sets[i]
            inputs = OpArgs([t.clone() for t in s.tensors], list(s.scalars), dims=dict(s.dims))
            for j, drawn in self.restore.items():
                inputs.tensors[j].copy_(drawn[i])
            if overwritten:  # the op wrote over what the GEMM gave it: the GEMM once more, eagerly
                torch.mm(self.a, self.w_before.t(), out=inputs.tensors[written].view(self.before.m, self.before.n))
            ref = inputs.for_reference(self.spec)
            reference(*ref.call_args(self.spec))
            verdict = compare(self.spec, self.dtype, s, ref)
            if not verdict.ok:
                return f"the sandwich's timed graph, repeat {position} of {len(order)}: {verdict.reason}"
        return ""
