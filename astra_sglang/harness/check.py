"""Correctness of a candidate against the fp64 torch reference and the baseline, with anti-cheat trials.

Every trial draws fresh inputs and hands every tensor in inside canary bytes (harness/guards.py), taken from
the same slabs as the timed launches (harness/arena.py); its outputs hold one of the pre-states of
harness/prestate.py, drawn at random per trial (NaN poison, an earlier call's results, random finite values),
as before every timed replay. After every call, every out and in-place argument is compared elementwise, the
canaries must be intact and input-only arguments unchanged bit for bit. The trial sequence is built so each
known cheat fails with its own reason:
  1 fresh buffers whose real inputs land behind a GPU delay on our stream (a decoy before it)
       -> unwritten / partly written output, wrong values, too imprecise, or the decoy's result:
          work not ordered on the given stream (own stream, returns early)
  2 new buffers, old ones NaN-poisoned -> reads memory of an earlier call
  3 same buffers, new values           -> skips work / caches results keyed on pointers
  4 same buffers, one element of every input changed, the outputs as the previous call left them (nearly
    right) -> skips work when its outputs look done or keyed on a sample of the values; then the same
    with a pre-state drawn at random
  5 spec edge cases (1 token, ±inf LSE, large magnitudes) on fresh buffers
Trials 1-4 draw ordinary random inputs: their RMS error is what `compare.less_precise` sets against the
original op's on the same inputs (the candidate's and the original's Checkers share a seed, and so their
inputs, pre-states and buffers).
"""
from __future__ import annotations

import random
from typing import Callable

import torch

from astra_sglang.harness import draw, prestate
from astra_sglang.harness.abi import ASTRA_REPLACED
from astra_sglang.harness.arena import Arena
from astra_sglang.harness.compare import Verdict, compare
from astra_sglang.harness.guards import snapshot_inputs, violation
from astra_sglang.harness.inputs import OpArgs, allocate, fill, poison_all
from astra_sglang.specs.records import KernelSpec

Runner = Callable[[OpArgs], int]  # launches on torch's current stream; returns the ABI code
SPIN_CYCLES = 2_000_000  # ~1 ms at H100/H200 clocks: far longer than any honest kernel's launch latency


NOT_COVERED = "not covered by this kernel (ASTRA_UNSUPPORTED): the original op would be called instead"
SAMPLED = ("skips work when most of its input repeats (caches on sampled values, or on outputs that already "
           "look done): ")


def perturb(spec: KernelSpec, args: OpArgs, keep: OpArgs, gen: torch.Generator,
            skip: frozenset[int] = frozenset()) -> None:
    """Back to `keep`'s values, then one element of every input argument changed; outputs are left as they are
    (prestate decides what they hold). Tensors indexed in `skip` are left alone."""
    for i, (arg, t, k) in enumerate(zip(spec.tensor_args, args.tensors, keep.tensors)):
        if i in skip or arg.role == "out":
            continue
        t.copy_(k)
        draw.perturb(arg, t, gen, args.dims or keep.dims)


class Checker:
    """Runs the trial sequence for one (spec, shape, dtype) on the current CUDA stream, on argument sets taken
    from `arena` in order (fresh guarded allocations without one)."""

    def __init__(self, spec: KernelSpec, shape: tuple[int, ...], dtype: str, device: torch.device, seed: int,
                 arena: Arena | None = None):
        self.spec, self.shape, self.dtype, self.device = spec, shape, dtype, device
        self.gen = torch.Generator(device=device).manual_seed(seed)
        self.rng = random.Random(seed)
        self.reference = spec.reference_fn()
        self.arena, self._taken = arena, 0

    def expected(self, args: OpArgs) -> OpArgs:
        ref = args.for_reference(self.spec)
        self.reference(*ref.call_args(self.spec))
        return ref

    def _take(self) -> OpArgs:
        if self.arena is None:
            return allocate(self.spec, self.shape, self.dtype, self.device)
        k, self._taken = self._taken % self.arena.count, self._taken + 1
        return self.arena.args(k)

    def _fresh(self, edge=None) -> OpArgs:
        return fill(self.spec, self._take(), self.gen, edge)

    def _outputs(self, args: OpArgs) -> list[torch.Tensor]:
        return [t.clone() for t in args.tensors]

    @staticmethod
    def _launch_failure(code: int) -> Verdict:
        # -1 after the first call accepted the shape: the kernel is inconsistent about what it covers
        reason = {-1: "launcher returned ASTRA_UNSUPPORTED for a shape it accepted before",
                  ASTRA_REPLACED: "replaced a tensor it was handed (its storage or its class) instead of writing into "
                                  "it"}.get(code, f"launch failed: cudaError {code}")
        return Verdict(False, reason, float("inf"))

    def _run(self, runner: Runner, args: OpArgs) -> Verdict | None:
        """One call; a failure verdict when it failed to launch or wrote where it must not."""
        before = snapshot_inputs(self.spec, args)
        code = runner(args)
        if code != 0:
            return self._launch_failure(code)
        torch.cuda.current_stream().synchronize()
        wrong = violation(self.spec, args, before)
        return Verdict(False, wrong, float("inf")) if wrong else None

    def trial(self, runner: Runner, args: OpArgs, label: str, kind: prestate.Kind = "nan",
              stale: list[torch.Tensor] | None = None) -> Verdict:
        """One call on `args` whose outputs first get `kind` ("stale": `stale`'s outputs, or as they are)."""
        prestate.prepare(self.spec, args.tensors, kind, self.gen, stale)
        before = prestate.snapshot(self.spec, args.tensors)
        ref = self.expected(args)
        failed = self._run(runner, args)
        verdict = failed or compare(self.spec, self.dtype, args, ref, before=before, held=prestate.HELD[kind])
        if not verdict.ok:
            verdict.reason = f"{label}: {verdict.reason}"
        return verdict

    def warm_up(self, runner: Runner) -> None:
        """One unchecked call on a 1-token shape: the library's first launch (module load, lazy init)
        must not be the stream-order trial, where an implicit synchronization would hide a bad stream."""
        shape = (1, *self.shape[1:])
        if not self.spec.supports(shape):
            shape = self.shape
        # Kept alive for the whole check: a freed warm-up buffer would hand its address to the next
        # allocation and make a kernel that caches on pointers fail for the wrong reason.
        self._warm = fill(self.spec, allocate(self.spec, shape, self.dtype, self.device, guard=False), self.gen)
        runner(self._warm)
        torch.cuda.synchronize()

    def run(self, runner: Runner, edge_cases: bool = True) -> Verdict:
        """The trial sequence; the verdict's RMS error covers trials 1-4 (ordinary random inputs)."""
        spec = self.spec
        edges = spec.edge_cases if edge_cases else []
        kinds = iter(prestate.schedule(self.rng, 4 + len(edges), first=("nan", "finite")))
        self.warm_up(runner)
        first = self._take()
        # First call of all: nothing ordered before it can hide a kernel that runs on another stream.
        total = self._stream_order(runner, first, next(kinds))
        if not total.ok:
            return total

        second = self._fresh()
        earlier = self._outputs(first)
        poison_all(first)  # kept alive (no address reuse) and NaN: reading it again shows up in the output
        steps = [("new buffers", "reads memory of an earlier call: ", next(kinds), earlier),
                 ("repeated buffers", "skips work or caches results for repeated inputs: ", next(kinds), None),
                 ("one element changed", SAMPLED, "stale", None),
                 ("one element changed", SAMPLED, next(kinds), None)]
        keep = None
        for step, (label, why, kind, stale) in enumerate(steps):
            if step == 1:  # same pointers, new values; the outputs as the last call left them unless drawn
                fill(spec, second, self.gen, skip=_outputs(spec))
                keep = second.clone()
            elif step > 1:  # the same values but one element of each input
                perturb(spec, second, keep, self.gen)
            verdict = self.trial(runner, second, label, kind, stale)
            if not verdict.ok:
                verdict.reason = why + verdict.reason.removeprefix("new buffers: ")
                return verdict
            total.absorb(verdict)

        for edge in edges:
            stale = self._outputs(second)
            args = self._fresh(edge)
            verdict = self.trial(runner, args, f"edge case {edge.name}", next(kinds), stale)
            if not verdict.ok:
                return verdict
            total.err_ratio = max(total.err_ratio, verdict.err_ratio)
        return total

    def _stream_order(self, runner: Runner, args: OpArgs, kind: prestate.Kind) -> Verdict:
        """The real inputs land only after a GPU-side delay on our stream; before it the buffers hold a
        valid decoy. A kernel not ordered on the given stream computes the decoy's result."""
        fill(self.spec, args, self.gen)
        decoy = self.expected(args)
        staged = fill(self.spec, args.clone(), self.gen)
        ref = self.expected(staged)
        prestate.prepare(self.spec, args.tensors, kind, self.gen)
        before = [s if a.role == "inplace" else b for a, s, b in
                  zip(self.spec.tensor_args, staged.tensors, prestate.snapshot(self.spec, args.tensors))]
        torch.cuda.synchronize()
        torch.cuda._sleep(SPIN_CYCLES)
        for arg, t, s in zip(self.spec.tensor_args, args.tensors, staged.tensors):
            if arg.role != "out":  # the outputs' pre-state was put there before the delay, not after
                t.copy_(s)
        guard = snapshot_inputs(self.spec, args)  # enqueued behind the delay, like the copies
        code = runner(args)
        torch.cuda.current_stream().synchronize()  # our stream only: work left elsewhere is not waited for
        if code == -1:
            return Verdict(False, NOT_COVERED, covered=False)
        if code != 0:
            failed = self._launch_failure(code)
            failed.reason = "fresh inputs: " + failed.reason
            return failed
        verdict = compare(self.spec, self.dtype, args, ref, before=before, held=prestate.HELD[kind])
        torch.cuda.synchronize()
        if not verdict.ok:
            stale = compare(self.spec, self.dtype, args, decoy)
            verdict.reason = ("work not ordered on the given stream (own stream or returns early): computed "
                              "the inputs from before the stream's pending writes" if stale.ok
                              else "fresh inputs: " + verdict.reason)
            return verdict
        wrong = violation(self.spec, args, guard)
        return Verdict(False, "fresh inputs: " + wrong, float("inf")) if wrong else verdict

    def agreement(self, candidate: Runner, baseline: Runner) -> Verdict:
        """Candidate vs baseline on the same fresh inputs, at twice the tolerance (both round once)."""
        args = self._fresh()
        other = args.clone()
        failed = self._run(candidate, args) or self._run(baseline, other)
        if failed:
            return failed
        loose = self.spec.model_copy(update={"tolerance": {
            k: v.model_copy(update={"atol": 2 * v.atol, "rtol": 2 * v.rtol}) for k, v in self.spec.tolerance.items()}})
        verdict = compare(loose, self.dtype, args, other)
        if not verdict.ok:
            verdict.reason = "disagrees with the baseline: " + verdict.reason
        return verdict


def _outputs(spec: KernelSpec) -> frozenset[int]:
    return frozenset(i for i, a in enumerate(spec.tensor_args) if a.role == "out")
