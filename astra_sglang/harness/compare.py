"""Elementwise comparison of a call's outputs with the fp64 reference, and precision against the original.

`compare` checks every out and in-place argument: unwritten elements (still what they held before the call: the
NaN poison, random values, an earlier call's results), NaNs the kernel computed, values beyond the
spec's tolerance, and the RMS error in units of that tolerance, which `less_precise` sets against the
original op's on the same inputs. Integer arguments (indices, counts, flags) are compared exactly; fp8 ones
after upcasting, with their own default tolerance (limits.FP8_TOLERANCE) where the spec gives none.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from astra_sglang.harness import draw, prestate
from astra_sglang.harness.inputs import OpArgs, checked_args
from astra_sglang.harness.limits import (FP8_TOLERANCE, PRECISION_FLOOR, PRECISION_MIN_ELEMENTS,
                                         PRECISION_MULTIPLE, PRECISION_MULTIPLE_DEFAULT)
from astra_sglang.specs import dtypes as dt
from astra_sglang.specs.records import Argument, KernelSpec, Tolerance


def tolerance_of(spec: KernelSpec, arg: Argument, dtype: str) -> Tolerance | None:
    """The tolerance `arg`'s values are judged by when the op runs over `dtype`; None: compared exactly."""
    name = arg.dtype_for(dtype)
    if name in dt.INTEGERS:
        return None
    if name in spec.tolerance:
        return spec.tolerance[name]
    if name in FP8_TOLERANCE:
        atol, rtol = FP8_TOLERANCE[name]
        return Tolerance(atol=atol, rtol=rtol)
    raise KeyError(f"{spec.name}: no tolerance for {arg.name}'s dtype {name}")


def expected_as_stored(out: torch.Tensor, expect: torch.Tensor) -> torch.Tensor:
    """A true result beyond the output dtype's range can only be stored as ±inf: expect exactly that (fp8
    e4m3 has no inf; it saturates or gives NaN, and is judged by value)."""
    if out.dtype in (torch.float8_e4m3fn,):
        return expect.double()
    stored = expect.to(out.dtype).double()
    return torch.where(torch.isinf(stored), stored, expect.double())


def mismatch(out: torch.Tensor, expect: torch.Tensor, tol: Tolerance | None) -> torch.Tensor:
    """Elementwise bool: this element fails (device-side, no sync)."""
    if tol is None:
        return out != expect.to(out.dtype)
    return error_ratio(out, expected_as_stored(out, expect), tol.atol, tol.rtol) > 1.0


def _left(out: torch.Tensor, bad: torch.Tensor, prior: torch.Tensor | None) -> torch.Tensor:
    """The failing elements that still hold what they held before the call (its snapshot `prior` where the
    caller took one) or the poison, which no arithmetic writes."""
    same = draw.poisoned(out)
    if prior is not None:
        same |= draw.bits(out) == draw.bits(prior)
    return bad & same


def _mostly_left(out: torch.Tensor, bad: torch.Tensor, left: torch.Tensor) -> bool:
    """Left unwritten, rather than written wrong: the poison is among the failing elements (no arithmetic writes
    it), or at least half of them still hold what they held before. A few wrong values among many that happen to
    equal the old ones (bf16 has 256 values an octave) are a coincidence, not elements left unwritten."""
    count = int(left.sum())
    return count > 0 and (bool(draw.poisoned(out[left]).any()) or 2 * count >= int(bad.sum()))


def _still(left: torch.Tensor) -> str:
    count = int(left.sum())
    return f" ({count} of them still what they held before the call)" if count else ""


def _unwritten(arg: Argument, out: torch.Tensor, left: torch.Tensor, held: str) -> Verdict:
    count = int(left.sum())
    if count == left.numel():
        return Verdict(False, f"{arg.name}: never written", float("inf"))
    if bool(draw.poisoned(out[left]).all()):
        held = prestate.HELD["nan"]
    what = "what they held before the call" if arg.role == "inplace" else held
    return Verdict(False, f"{arg.name}: {count} of {left.numel()} elements left unwritten (still {what})",
                   float("inf"))


def _exact(arg: Argument, out: torch.Tensor, expect: torch.Tensor, prior: torch.Tensor | None,
           held: str) -> Verdict | None:
    bad = out != expect.to(out.dtype)
    count = int(bad.sum())
    if not count:
        return None
    left = _left(out, bad, prior)
    if _mostly_left(out, bad, left):
        return _unwritten(arg, out, left, held)
    return Verdict(False, f"{arg.name}: wrong values: {count} of {out.numel()} elements differ (compared "
                          f"exactly){_still(left)}", float("inf"))


@dataclass
class Verdict:
    ok: bool
    reason: str = ""
    err_ratio: float = 0.0
    """Worst |out - ref| / (atol + rtol |ref|) over the compared elements: <= 1 passes."""
    covered: bool = True
    """False when the kernel declined the shape on its first call."""
    sq_sum: float = 0.0
    count: int = 0
    """Sum of squared error ratios over `count` finite elements: the RMS error of the trials it covers."""
    parts: dict[str, tuple[float, int]] = field(default_factory=dict)
    """The same sums per stored dtype of the outputs compared (topk_softmax's fp32 weights, FP8 quant's e4m3
    values beside fp32 scales): each is held to its own dtype's precision multiple."""

    @property
    def rms(self) -> float:
        return math.sqrt(self.sq_sum / self.count) if self.count else 0.0

    def absorb(self, other: "Verdict") -> None:
        """Fold another passing trial into this running verdict."""
        self.err_ratio = max(self.err_ratio, other.err_ratio)
        self.sq_sum += other.sq_sum
        self.count += other.count
        for dtype, (sq, n) in other.parts.items():
            old_sq, old_n = self.parts.get(dtype, (0.0, 0))
            self.parts[dtype] = (old_sq + sq, old_n + n)


def error_ratio(out: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float) -> torch.Tensor:
    """|out - ref| / (atol + rtol |ref|) elementwise; 0 where equal (incl. same infinities), inf for NaN."""
    o, r = out.double(), ref.double()
    ratio = (o - r).abs() / (atol + rtol * r.abs())
    ratio = torch.where(o == r, torch.zeros_like(ratio), ratio)
    return torch.where(torch.isnan(ratio), torch.full_like(ratio, float("inf")), ratio)


def compare(spec: KernelSpec, dtype: str, got: OpArgs, ref: OpArgs, rows: slice | None = None,
            before: list[torch.Tensor | None] | None = None, held: str = prestate.HELD["nan"]) -> Verdict:
    """Every out and in-place argument of `got` against the fp64 reference `ref`. `before`: what each held
    before the call (prestate.snapshot), which `held` describes; a failing element that still holds it was
    left unwritten, a NaN the kernel wrote where the reference is finite was computed."""
    result = Verdict(True)
    for index, _role in checked_args(spec):
        arg = spec.tensor_args[index]
        tol = tolerance_of(spec, arg, dtype)
        out, expect = got.tensors[index], ref.tensors[index]
        prior = before[index] if before is not None else None
        if rows is not None:
            out, expect = out[rows], expect[rows]
            prior = prior[rows] if prior is not None else None
        if tol is None:
            wrong = _exact(arg, out, expect, prior, held)
            if wrong is not None:
                return wrong
            continue
        expect = expected_as_stored(out, expect)
        ratio = error_ratio(out, expect, tol.atol, tol.rtol)
        bad = ratio > 1.0
        if not bool(bad.any()):
            finite = ratio[torch.isfinite(ratio)]
            sq, n = float((finite * finite).sum()), finite.numel()
            stored = str(out.dtype).removeprefix("torch.")
            result.absorb(Verdict(True, err_ratio=float(ratio.max()) if ratio.numel() else 0.0, sq_sum=sq,
                                  count=n, parts={stored: (sq, n)}))
            continue
        left = _left(out, bad, prior)
        if _mostly_left(out, bad, left):
            return _unwritten(arg, out, left, held)
        made = torch.isnan(out) & ~torch.isnan(expect)
        if bool(made.any()):
            return Verdict(False, f"{arg.name}: computed NaN at {int(made.sum())} of {out.numel()} elements where "
                                  "the reference is finite (written by the kernel, not left unwritten)", float("inf"))
        value = float(ratio.max())
        rel = float(((out.double() - expect).abs() / (expect.abs() + tol.atol))[bad].max())
        kind = "too imprecise (low-precision math?)" if rel < 0.25 else "wrong values"
        return Verdict(False, f"{arg.name}: {kind}: {int(bad.sum())} elements beyond tolerance, "
                              f"worst {value:.1f}x atol+rtol|ref|{_still(left)}", value)
    return result


def precision_verdict(candidate: Verdict, original: Verdict) -> str:
    """'' when, for every stored dtype of the outputs compared, the candidate's RMS error is within that dtype's
    PRECISION_MULTIPLE of the original's on the same inputs (`less_precise`); else the first refusal, with
    the outputs' dtype named where the op's outputs have several."""
    for dtype, (sq, n) in sorted(candidate.parts.items()):
        base_sq, base_n = original.parts.get(dtype, (0.0, 0))
        worse = less_precise(dtype, math.sqrt(sq / n) if n else 0.0,
                             math.sqrt(base_sq / base_n) if base_n else 0.0, n)
        if worse:
            return worse if len(candidate.parts) == 1 else f"{worse} ({dtype} outputs)"
    return ""


def less_precise(dtype: str, candidate_rms: float, original_rms: float, elements: int) -> str:
    """'' when the candidate's RMS error is within PRECISION_MULTIPLE of the original's on the same inputs,
    or when too few elements were compared for the ratio to mean anything (PRECISION_MIN_ELEMENTS). `dtype`
    is the outputs' stored dtype: fp32 outputs of a bf16 op (router weights) carry fp32 summation noise."""
    limit = PRECISION_MULTIPLE.get(dtype, PRECISION_MULTIPLE_DEFAULT)
    if elements < PRECISION_MIN_ELEMENTS or candidate_rms <= max(limit * original_rms, PRECISION_FLOOR):
        return ""
    return (f"less precise than the original: RMS error {candidate_rms:.3g} vs its {original_rms:.3g} "
            f"(in units of the tolerance), more than {limit}x")
