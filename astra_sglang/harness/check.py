"""Correctness of a candidate against the fp64 torch reference and the baseline, with anti-cheat trials.

Every trial draws fresh inputs and poisons outputs with NaN; every out and in-place argument is compared
elementwise. The trial sequence is built so each known cheat fails with its own reason:
  1 fresh buffers whose real inputs land behind a GPU delay on our stream (a decoy before it)
       -> unwritten / partly written output, wrong values, too imprecise, or the decoy's result:
          work not ordered on the given stream (own stream, returns early)
  2 new buffers, old ones NaN-poisoned -> reads memory of an earlier call
  3 same buffers, new values           -> skips work / caches results for repeated inputs
  4 spec edge cases (1 token, ±inf LSE, large magnitudes) on fresh buffers
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from astra_sglang.harness.inputs import OpArgs, allocate, checked_args, fill, poison_all
from astra_sglang.specs.records import KernelSpec

Runner = Callable[[OpArgs], int]  # launches on torch's current stream; returns the ABI code
SPIN_CYCLES = 2_000_000  # ~1 ms at H100/H200 clocks: far longer than any honest kernel's launch latency


NOT_COVERED = "not covered by this kernel (ASTRA_UNSUPPORTED): the original op would be called instead"


@dataclass
class Verdict:
    ok: bool
    reason: str = ""
    err_ratio: float = 0.0
    covered: bool = True
    """False when the kernel declined the shape on its first call (never a pass: winners must cover all)."""


def error_ratio(out: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float) -> torch.Tensor:
    """|out - ref| / (atol + rtol |ref|) elementwise; 0 where equal (incl. same infinities), inf for NaN."""
    o, r = out.double(), ref.double()
    ratio = (o - r).abs() / (atol + rtol * r.abs())
    ratio = torch.where(o == r, torch.zeros_like(ratio), ratio)
    return torch.where(torch.isnan(ratio), torch.full_like(ratio, float("inf")), ratio)


def compare(spec: KernelSpec, dtype: str, got: OpArgs, ref: OpArgs, rows: slice | None = None) -> Verdict:
    worst = 0.0
    for index, _role in checked_args(spec):
        arg = spec.tensor_args[index]
        tol = spec.tolerance[dtype if arg.dtype == "T" else arg.dtype]
        out, expect = got.tensors[index], ref.tensors[index]
        if rows is not None:
            out, expect = out[rows], expect[rows]
        # A true result beyond the output dtype's range can only be stored as ±inf: expect exactly that.
        stored = expect.to(out.dtype).double()
        expect = torch.where(torch.isinf(stored), stored, expect.double())
        nan_out = torch.isnan(out) & ~torch.isnan(expect)
        if bool(nan_out.any()):
            frac = float(nan_out.double().mean())
            what = "never written" if frac > 0.999 else f"{frac:.1%} of elements left NaN (unwritten)"
            return Verdict(False, f"{arg.name}: {what}", float("inf"))
        ratio = error_ratio(out, expect, tol.atol, tol.rtol)
        value = float(ratio.max()) if ratio.numel() else 0.0
        worst = max(worst, value)
        if value > 1.0:
            bad = ratio > 1.0
            rel = float(((out.double() - expect).abs() / (expect.abs() + tol.atol))[bad].max())
            kind = "too imprecise (low-precision math?)" if rel < 0.25 else "wrong values"
            return Verdict(False, f"{arg.name}: {kind}: {int(bad.sum())} elements beyond tolerance, "
                                  f"worst {value:.1f}x atol+rtol|ref|", value)
    return Verdict(True, "", worst)


class Checker:
    """Runs the trial sequence for one (spec, shape, dtype) on the current CUDA stream."""

    def __init__(self, spec: KernelSpec, shape: tuple[int, ...], dtype: str, device: torch.device, seed: int):
        self.spec, self.shape, self.dtype, self.device = spec, shape, dtype, device
        self.gen = torch.Generator(device=device).manual_seed(seed)
        self.reference = spec.reference_fn()

    def expected(self, args: OpArgs) -> OpArgs:
        ref = args.upcast()
        self.reference(*ref.call_args(self.spec))
        return ref

    @staticmethod
    def _launch_failure(code: int) -> Verdict:
        # -1 after the first call accepted the shape: the kernel is inconsistent about what it covers
        return Verdict(False, "launcher returned ASTRA_UNSUPPORTED for a shape it accepted before" if code == -1
                       else f"launch failed: cudaError {code}", float("inf"))

    def _run(self, runner: Runner, args: OpArgs) -> Verdict | None:
        code = runner(args)
        if code != 0:
            return self._launch_failure(code)
        torch.cuda.current_stream().synchronize()
        return None

    def trial(self, runner: Runner, args: OpArgs, label: str) -> Verdict:
        ref = self.expected(args)
        failed = self._run(runner, args)
        verdict = failed or compare(self.spec, self.dtype, args, ref)
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
        self._warm = fill(self.spec, allocate(self.spec, shape, self.dtype, self.device), self.gen)
        runner(self._warm)
        torch.cuda.synchronize()

    def run(self, runner: Runner, edge_cases: bool = True) -> Verdict:
        spec = self.spec
        self.warm_up(runner)
        first = allocate(spec, self.shape, self.dtype, self.device)
        # First call of all: nothing ordered before it can hide a kernel that runs on another stream.
        verdict = self._stream_order(runner, first)
        if not verdict.ok:
            return verdict
        worst = verdict.err_ratio

        second = fill(spec, allocate(spec, self.shape, self.dtype, self.device), self.gen)
        poison_all(first)  # kept alive (no address reuse) and NaN: reading it again shows up in the output
        verdict = self.trial(runner, second, "new buffers")
        if not verdict.ok:
            verdict.reason = verdict.reason.replace("new buffers:", "reads memory of an earlier call:")
            return verdict
        worst = max(worst, verdict.err_ratio)

        fill(spec, second, self.gen)  # same pointers, new values
        verdict = self.trial(runner, second, "repeated buffers")
        if not verdict.ok:
            verdict.reason = "skips work or caches results for repeated inputs: " + verdict.reason
            return verdict
        worst = max(worst, verdict.err_ratio)

        for edge in spec.edge_cases if edge_cases else []:
            args = fill(spec, allocate(spec, self.shape, self.dtype, self.device), self.gen, edge)
            verdict = self.trial(runner, args, f"edge case {edge.name}")
            if not verdict.ok:
                return verdict
            worst = max(worst, verdict.err_ratio)
        return Verdict(True, "", worst)

    def _stream_order(self, runner: Runner, args: OpArgs) -> Verdict:
        """The real inputs land only after a GPU-side delay on our stream; before it the buffers hold a
        valid decoy. A kernel not ordered on the given stream computes the decoy's result."""
        fill(self.spec, args, self.gen)
        decoy = self.expected(args)
        staged = fill(self.spec, args.clone(), self.gen)
        ref = self.expected(staged)
        torch.cuda.synchronize()
        torch.cuda._sleep(SPIN_CYCLES)
        for arg, t, s in zip(self.spec.tensor_args, args.tensors, staged.tensors):
            if arg.role != "out":  # outputs were poisoned before the delay, not after
                t.copy_(s)
        code = runner(args)
        torch.cuda.current_stream().synchronize()  # our stream only: work left elsewhere is not waited for
        if code == -1:
            return Verdict(False, NOT_COVERED, covered=False)
        if code != 0:
            failed = self._launch_failure(code)
            failed.reason = "fresh inputs: " + failed.reason
            return failed
        verdict = compare(self.spec, self.dtype, args, ref)
        torch.cuda.synchronize()
        if not verdict.ok:
            stale = compare(self.spec, self.dtype, args, decoy)
            verdict.reason = ("work not ordered on the given stream (own stream or returns early): computed "
                              "the inputs from before the stream's pending writes" if stale.ok
                              else "fresh inputs: " + verdict.reason)
        return verdict

    def agreement(self, candidate: Runner, baseline: Runner) -> Verdict:
        """Candidate vs baseline on the same fresh inputs, at twice the tolerance (both round once)."""
        args = fill(self.spec, allocate(self.spec, self.shape, self.dtype, self.device), self.gen)
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
