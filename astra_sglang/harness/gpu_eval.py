"""The GPU half of an evaluation: load candidate + baseline, check and time one shape at a time.

Per shape: the trial sequence for the candidate and the original on the same inputs (harness/check.py),
precision against the original, agreement with it; then timing over one argument set per launch, the
check of what the timed launches computed (harness/timed.py), and the physics bound: a time the copy
roofline, the matmul rate (ops whose cost model counts FLOPs) or the empty kernel measured in this run rules
out is a measurement failure, never a speedup.
"""
from __future__ import annotations

import gc
import importlib
import zlib

import torch

from astra_sglang.harness.abi import KernelLibrary, Launcher
from astra_sglang.harness.check import NOT_COVERED, Checker
from astra_sglang.harness.compare import precision_verdict
from astra_sglang.harness.cost import shape_cost
from astra_sglang.harness.limits import COMPUTE_MARGIN, FLOOR_MARGIN, ROOFLINE_MARGIN
from astra_sglang.harness.records import EvalRequest, ShapeResult
from astra_sglang.harness.timed import TimedSets
from astra_sglang.harness.timing import (MAX_LAUNCHES, Ceilings, blame, capture, eager_us, launches_for,
                                         memory_budget, ratio_median, rotation_sets, summarize, time_graphs)
from astra_sglang.specs.records import KernelSpec


def python_op(spec: KernelSpec, path: str):
    """A Python callable behind the Launcher interface: fn(*spec-ordered args); ABI code 0."""
    module, _, name = path.removeprefix("py:").rpartition(":")
    fn = getattr(importlib.import_module(module), name)
    kinds = [a.kind for a in spec.arguments]

    def launch(tensors, scalars) -> int:
        ts, ss = iter(tensors), iter(scalars)
        try:
            fn(*[next(ts) if k == "tensor" else next(ss) for k in kinds])
        except (ValueError, TypeError, NotImplementedError, AssertionError):
            return -1  # the original op refuses this shape/dtype (e.g. alignment): it does not cover it
        except RuntimeError as exc:
            if "CUDA" in str(exc):  # a device fault: the context is gone, let the worker report it
                raise
            return -1  # a dispatch refusal such as "failed to dispatch data type Float"
        return 0

    return launch


BASELINE_CRASHED = "the original op crashed here"
MEASUREMENT = "measurement failure"


def physics(row: ShapeResult, roofline_gbps: float, empty_us: float, hot: bool, us: float | None = None,
            what: str = "a launch", tflops: float | None = None) -> str:
    """'' when the candidate's time (`us`, default its graph-replay median) is one the hardware allows: no
    faster than the empty kernel, (L2 cold) moving its bytes at no more than ROOFLINE_MARGIN x the copy
    roofline measured in the same run, and doing its FLOPs (where the cost model counts them) at no more than
    COMPUTE_MARGIN x the matmul rate `tflops` measured in the same run: whichever of the two binds."""
    us = row.candidate.median_us if us is None else us
    if us < FLOOR_MARGIN * empty_us:
        return (f"{MEASUREMENT}: {us:.3g} us {what} is less than the empty kernel's {empty_us:.3g} us "
                "measured in this run")
    if row.flops and tflops and row.flops / us / 1e6 > COMPUTE_MARGIN * tflops:
        return (f"{MEASUREMENT}: {row.flops} FLOPs in {us:.3g} us ({what}) is {row.flops / us / 1e6:.0f} TFLOP/s, "
                f"more than {COMPUTE_MARGIN}x the {tflops:.0f} TFLOP/s matmul rate measured in this run")
    if not hot and row.min_bytes / us / 1e3 > ROOFLINE_MARGIN * roofline_gbps:
        return (f"{MEASUREMENT}: {row.min_bytes} bytes in {us:.3g} us ({what}) is {row.min_bytes / us / 1e3:.0f} GB/s, "
                f"more than {ROOFLINE_MARGIN}x the {roofline_gbps:.0f} GB/s copy roofline measured in this run")
    return ""


class GpuSession:
    def __init__(self, spec: KernelSpec, candidate_lib: str, baseline_lib: str, probes_lib: str, req: EvalRequest):
        self.spec, self.req = spec, req
        self.faults = {(tuple(f.shape), f.dtype): f.reason for f in req.baseline_faults}
        self.device = torch.device("cuda", torch.cuda.current_device())
        self.candidate = self._launcher(candidate_lib)
        self.baseline = self._launcher(baseline_lib)
        # A non-blocking side stream: work a kernel puts on the legacy default stream is not ordered with it.
        self.stream = torch.cuda.Stream(device=self.device)
        with torch.cuda.stream(self.stream):
            ceilings = Ceilings(probes_lib)
            # Only where the cost model counts FLOPs: the probe costs ~0.1 s and 400 MB.
            self.tflops = ceilings.measure_matmul() if spec.cost else None
        self.gpu = torch.cuda.get_device_name(self.device)
        self.roofline, self.empty_us = ceilings.roofline_gbps, ceilings.empty_us

    def _launcher(self, library: str):
        if library.startswith("py:"):
            return python_op(self.spec, library)
        return Launcher(KernelLibrary(library), len(self.spec.tensor_args), len(self.spec.scalar_args))

    def evaluate_shape(self, shape: tuple[int, ...], dtype: str, progress) -> ShapeResult:
        cost = shape_cost(self.spec, shape, dtype)
        row = ShapeResult(shape=shape, dtype=dtype, min_bytes=cost.bytes, flops=cost.flops)
        # No cleanup in a `finally`: after a CUDA fault, empty_cache() raises again, and that second error
        # would replace the first one, which names the side that faulted.
        with torch.cuda.stream(self.stream):
            if self.req.check:
                self._check(row, shape, dtype)
            if self.req.time and row.correct is not False and row.covered:
                progress(stage="time", shape=shape, dtype=dtype)
                blame("timing", lambda: self._time(row, shape, dtype))
        gc.collect()
        torch.cuda.empty_cache()
        return row

    def _runner(self, launcher):
        return lambda args: launcher(args.tensors, args.scalars)

    def _seed(self, shape, dtype) -> int:
        return self.req.seed * 7919 + zlib.crc32(repr((shape, dtype)).encode()) % 100_000

    def _check(self, row: ShapeResult, shape, dtype) -> None:
        seed = self._seed(shape, dtype)
        cand, base = self._runner(self.candidate), self._runner(self.baseline)
        verdict = blame("candidate", lambda: Checker(self.spec, shape, dtype, self.device, seed).run(
            cand, self.req.edge_cases))
        row.correct = verdict.ok if verdict.covered else None
        row.reason, row.max_err_ratio = verdict.reason, verdict.err_ratio if verdict.covered else None
        row.err_rms = verdict.rms if verdict.ok else None
        if not verdict.covered:
            row.covered = False
            return
        fault = self.faults.get((tuple(shape), dtype))
        if fault:  # an earlier child's context died in the original here: the reference alone judges
            row.baseline_defect = f"{BASELINE_CRASHED} ({fault})"
            return
        # The same seed: the original meets the very inputs the candidate met, trial for trial.
        base_verdict = blame("baseline", lambda: Checker(self.spec, shape, dtype, self.device, seed).run(
            base, self.req.edge_cases))
        if not base_verdict.ok:
            row.baseline_defect = base_verdict.reason
            return
        row.baseline_err_rms = base_verdict.rms
        if not verdict.ok:
            return
        worse = precision_verdict(verdict, base_verdict)
        if worse:
            row.correct, row.reason = False, worse
            return
        agree = Checker(self.spec, shape, dtype, self.device, seed + 1).agreement(cand, base)
        if not agree.ok:
            row.correct, row.reason = False, agree.reason

    def _time(self, row: ShapeResult, shape, dtype) -> None:
        hot = self.req.l2 == "hot"
        sets = TimedSets(self.spec, shape, dtype, self.device, seed=1234, hot=hot)
        budget = memory_budget()
        per_set = sets.own_bytes()
        sets.grow(1 if hot else rotation_sets(per_set, budget))

        def fn(launcher):
            return lambda i: launcher(sets.sets[i].tensors, sets.sets[i].scalars)

        fns = {"candidate": fn(self.candidate)}
        if not row.baseline_defect.startswith((NOT_COVERED, BASELINE_CRASHED)):  # nothing to compare with
            fns["baseline"] = fn(self.baseline)
        probe = len(sets.sets)
        launches = max(blame(name, lambda: launches_for(f, probe)) for name, f in fns.items())
        launches = max(1, min(launches, MAX_LAUNCHES, max(probe, budget // max(per_set, 1))))
        sets.grow(launches)
        graphs = {name: blame(name, lambda: capture(f, launches, launches)) for name, f in fns.items()}
        samples = time_graphs(graphs, launches)
        row.candidate = summarize(samples["candidate"])
        wrong = blame("candidate", lambda: sets.verify(graphs["candidate"].replay, "the timed graph"))
        wrong = wrong or physics(row, self.roofline, self.empty_us, hot, tflops=self.tflops)
        if wrong:  # what was timed is not what was checked: no figure for it
            row.correct, row.reason, row.candidate = False, wrong, None
            return
        if "baseline" in samples:
            row.baseline = summarize(samples["baseline"])
            row.speedup = ratio_median(samples["baseline"], samples["candidate"])
        row.gbps = row.min_bytes / row.candidate.median_us / 1e3
        row.pct_roofline = 100.0 * row.gbps / self.roofline
        compute_us = row.flops / self.tflops / 1e6 if row.flops and self.tflops else 0.0
        row.floor_us = max(row.min_bytes / self.roofline / 1e3, compute_us, self.empty_us)
        row.tflops = row.flops / row.candidate.median_us / 1e6 if row.flops else None
        cand = fns["candidate"]
        row.eager_candidate_us = blame("candidate", lambda: eager_us(cand, launches))
        wrong = blame("candidate", lambda: sets.verify(lambda: [cand(i) for i in range(launches)], "eager calls"))
        wrong = wrong or physics(row, self.roofline, 0.0, hot, row.eager_candidate_us, "a call, eager", self.tflops)
        if wrong:
            row.correct, row.reason, row.candidate, row.speedup, row.eager_candidate_us = False, wrong, None, None, None
            return
        if row.baseline:
            row.eager_baseline_us = blame("baseline", lambda: eager_us(fns["baseline"], launches))

