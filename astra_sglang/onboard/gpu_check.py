"""The first GPU run of an onboarded op (`bench` calls it before its first evaluation): what CPU could not check.

1. The dtypes the op runs in on the GPU (the recorded ones, and bf16 / fp16 / fp32 where its T is a float).
2. Its tolerance, per dtype, from the op's own figures at the smallest recorded shapes: run to run (the op twice on
   the same inputs) and upcast (the op in its dtype against the op in float32 on the same values), each as the
   worst error in units of the dtype's rounding (guess.TOLERANCES). The tolerance is that rounding widened until
   the run-to-run difference takes at most a quarter of it and the upcast difference at most half: a candidate
   judged against the op then has the room the op itself needs.
3. The proposed torch reference against the op, at those shapes, with that tolerance: kept where it agrees;
   otherwise the op itself becomes the reference (the oracle), and the spec says why.
The spec file is then rewritten in place (onboard/specfile.py) with the figures, the GPU and the date in
`[onboard]`, so the run is done once.
"""
from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass

import torch

from astra_sglang.errors import AstraError
from astra_sglang.onboard.checks import FLOAT_DTYPES, _resolve, run_on
from astra_sglang.onboard.specfile import rewrite
from astra_sglang.onboard.guess import TOLERANCES
from astra_sglang.specs.records import KernelSpec, Tolerance

DEVICE = "cuda"
UPCAST_CAP = 16.0
"""An upcast difference above this many roundings is not the op's rounding but another computation (an op that
reads float32 as its own dtype without refusing it): left out, said so."""
SHAPES = 3
"""Recorded shapes (the smallest by bytes) the figures are measured at."""
RUN_TO_RUN_SHARE, UPCAST_SHARE = 0.25, 0.5


@dataclass
class Figures:
    dtype: str
    run_to_run: float
    upcast: float | None
    """None: the op does not run in float32, or T is float32, or its float32 result is another computation."""
    note: str = ""

    @property
    def scale(self) -> float:
        finite = [v for v in (self.run_to_run / RUN_TO_RUN_SHARE, (self.upcast or 0.0) / UPCAST_SHARE)
                  if math.isfinite(v)]
        return max([1.0, *finite])

    def describe(self) -> str:
        up = f"{self.upcast:.3g}" if self.upcast is not None else f"- ({self.note})" if self.note \
            else "- (float32 itself)" if self.dtype == "float32" else "- (the op does not run in float32)"
        return (f"run-to-run {self.run_to_run:.3g}, upcast {up} (worst error in units of the {self.dtype} "
                f"rounding); tolerance = that rounding x {self.scale:.3g}")


def _runs(spec: KernelSpec, op, shape, dtype: str) -> bool:
    try:
        run_on(spec, op, shape, dtype, DEVICE)
        torch.cuda.synchronize() if DEVICE == "cuda" else None
    except Exception:  # noqa: BLE001 - the op refuses this dtype (or shape)
        return False
    return True


def _with(spec: KernelSpec, tolerance: dict[str, tuple[float, float]]) -> KernelSpec:
    table = {**spec.tolerance, **{d: Tolerance(atol=a, rtol=r) for d, (a, r) in tolerance.items()}}
    return spec.model_copy(update={"tolerance": table})


def _ratio(spec: KernelSpec, dtype: str, got, ref) -> float:
    from astra_sglang.harness.compare import compare

    verdict = compare(spec, dtype, got, ref)
    return verdict.err_ratio if verdict.ok or math.isfinite(verdict.err_ratio) else math.inf


def measure(spec: KernelSpec, op, shapes: list[tuple[int, ...]], dtype: str) -> Figures:
    """The op's own differences in `dtype` at `shapes`, in units of the dtype's default tolerance."""
    from astra_sglang.harness import draw
    from astra_sglang.harness.inputs import allocate

    base = _with(spec, {d: TOLERANCES[d] for d in TOLERANCES})
    run_to_run, upcast = 0.0, 0.0 if dtype != "float32" else None
    for seed, shape in enumerate(shapes):
        args, first = run_on(spec, op, shape, dtype, DEVICE, seed)
        _, second = run_on(spec, op, shape, dtype, DEVICE, seed)
        run_to_run = max(run_to_run, _ratio(base, dtype, second, first))
        if upcast is None:
            continue
        wide = allocate(spec, shape, "float32", DEVICE, guard=False)
        for arg, t, src in zip(spec.tensor_args, wide.tensors, args.tensors):
            t.copy_(src) if arg.role != "out" else draw.poison(t)
        try:
            op(*wide.call_args(spec))
        except Exception:  # noqa: BLE001 - no float32 path: the figure is left out
            upcast = None
            continue
        upcast = max(upcast, _ratio(base, dtype, first, wide))
        if upcast > UPCAST_CAP:
            return Figures(dtype, run_to_run, None, f"its float32 result differs by {upcast:.3g} roundings: not "
                                                    "the same computation, left out")
    return Figures(dtype, run_to_run, upcast)


def reference_agrees(spec: KernelSpec, op, shapes: list[tuple[int, ...]], dtypes: list[str]) -> str:
    """'' where the spec's torch reference agrees with the op at every shape and dtype; else the first
    disagreement."""
    from astra_sglang.harness.compare import compare

    reference = spec.reference_fn()
    for dtype in dtypes:
        for seed, shape in enumerate(shapes):
            args, got = run_on(spec, op, shape, dtype, DEVICE, 100 + seed)
            ref = args.upcast()
            try:
                reference(*ref.call_args(spec))
            except Exception as exc:  # noqa: BLE001 - the user's code
                return f"it fails at {'x'.join(map(str, shape))} {dtype} on the GPU: {type(exc).__name__}: {exc}"
            verdict = compare(spec, dtype, got, ref)
            if not verdict.ok:
                return f"at {'x'.join(map(str, shape))} {dtype} the op differs from it: {verdict.reason}"
    return ""


def first_gpu_run(spec: KernelSpec, path, echo=print) -> bool:
    """Check `spec` (a user spec at `path` that `onboard` wrote and no GPU has checked) on this GPU and write what
    was found into it; False where there is nothing to do (not onboarded, already checked, or no GPU)."""
    if spec.onboard is None or spec.onboard.gpu_check or not torch.cuda.is_available():
        return False
    echo(f"{spec.name}: first GPU run: the op's dtypes, tolerance and reference (written into {path})")
    op = _resolve(spec.onboard.call)
    shapes = sorted((tuple(s) for s in spec.shapes.quick), key=lambda s: spec.call_bytes(s, spec.dtypes[0]))[:SHAPES]
    if not shapes:
        raise AstraError(f"{spec.name}: the spec has no quick shapes to check the op at")
    probe = spec.dtypes + ([d for d in FLOAT_DTYPES if d not in spec.dtypes] if spec.dtypes[0] in FLOAT_DTYPES else [])
    dtypes = [d for d in probe if _runs(spec, op, shapes[0], d)]
    if not dtypes:
        raise AstraError(f"{spec.name}: the op runs in none of {probe} at {'x'.join(map(str, shapes[0]))} on this GPU")
    figures = {d: measure(spec, op, shapes, d) for d in dtypes}
    scale = max(f.scale for f in figures.values())
    tolerance = {d: (TOLERANCES[d][0] * figures[d].scale if d in figures else TOLERANCES[d][0] * scale,
                     TOLERANCES[d][1] * figures[d].scale if d in figures else TOLERANCES[d][1] * scale)
                 for d in TOLERANCES if d in spec.tolerance or d in dtypes}
    checked = _with(spec, tolerance).model_copy(update={"dtypes": dtypes})
    gpu = f"{torch.cuda.get_device_name()}, {dt.date.today().isoformat()}"
    changes: list[tuple[str, str, object]] = [("", "dtypes", dtypes)]
    changes += [("tolerance", d, {"atol": float(f"{a:.3g}"), "rtol": float(f"{r:.3g}")})
                for d, (a, r) in tolerance.items()]
    changes += [("onboard", "measured", {d: f.describe() for d, f in figures.items()})]
    verdict = "the op is its own reference (oracle)"
    if spec.reference_dtype == "float64":
        why = reference_agrees(checked, op, shapes, dtypes)
        if why:
            verdict = f"the proposed reference {spec.reference} was not accepted ({why}): the op is the reference"
            changes += [("", "reference", spec.onboard.call), ("", "reference_dtype", "op")]
        else:
            verdict = f"the reference {spec.reference} agrees with the op"
    changes.append(("onboard", "gpu_check", f"{gpu}: {verdict}; dtypes {', '.join(dtypes)}"))
    rewrite(path, changes)
    for d, f in figures.items():
        echo(f"  {d}: {f.describe()}")
    echo(f"  {verdict}")
    return True
