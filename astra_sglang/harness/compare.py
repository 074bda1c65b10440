"""Elementwise comparison of a call's outputs with the fp64 reference, and precision against the original.

`compare` checks every out and in-place argument: unwritten (NaN-poisoned) elements, values beyond the
spec's tolerance, and the RMS error in units of that tolerance, which `less_precise` sets against the
original op's on the same inputs.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from astra_sglang.harness.inputs import OpArgs, checked_args
from astra_sglang.harness.limits import PRECISION_FLOOR, PRECISION_MIN_ELEMENTS, PRECISION_MULTIPLE
from astra_sglang.specs.records import KernelSpec


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

    @property
    def rms(self) -> float:
        return math.sqrt(self.sq_sum / self.count) if self.count else 0.0

    def absorb(self, other: "Verdict") -> None:
        """Fold another passing trial into this running verdict."""
        self.err_ratio = max(self.err_ratio, other.err_ratio)
        self.sq_sum += other.sq_sum
        self.count += other.count


def error_ratio(out: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float) -> torch.Tensor:
    """|out - ref| / (atol + rtol |ref|) elementwise; 0 where equal (incl. same infinities), inf for NaN."""
    o, r = out.double(), ref.double()
    ratio = (o - r).abs() / (atol + rtol * r.abs())
    ratio = torch.where(o == r, torch.zeros_like(ratio), ratio)
    return torch.where(torch.isnan(ratio), torch.full_like(ratio, float("inf")), ratio)


def compare(spec: KernelSpec, dtype: str, got: OpArgs, ref: OpArgs, rows: slice | None = None) -> Verdict:
    result = Verdict(True)
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
        if value > 1.0:
            bad = ratio > 1.0
            rel = float(((out.double() - expect).abs() / (expect.abs() + tol.atol))[bad].max())
            kind = "too imprecise (low-precision math?)" if rel < 0.25 else "wrong values"
            return Verdict(False, f"{arg.name}: {kind}: {int(bad.sum())} elements beyond tolerance, "
                                  f"worst {value:.1f}x atol+rtol|ref|", value)
        finite = ratio[torch.isfinite(ratio)]
        result.absorb(Verdict(True, err_ratio=value, sq_sum=float((finite * finite).sum()), count=finite.numel()))
    return result


def less_precise(dtype: str, candidate_rms: float, original_rms: float, elements: int) -> str:
    """'' when the candidate's RMS error is within PRECISION_MULTIPLE of the original's on the same inputs,
    or when too few elements were compared for the ratio to mean anything (PRECISION_MIN_ELEMENTS)."""
    limit = PRECISION_MULTIPLE[dtype]
    if elements < PRECISION_MIN_ELEMENTS or candidate_rms <= max(limit * original_rms, PRECISION_FLOOR):
        return ""
    return (f"less precise than the original: RMS error {candidate_rms:.3g} vs its {original_rms:.3g} "
            f"(in units of the tolerance), more than {limit}x")
