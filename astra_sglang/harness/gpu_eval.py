"""The GPU half of an evaluation: load candidate + baseline libraries, check and time one shape at a time."""
from __future__ import annotations

import gc
import importlib
import zlib

import torch

from astra_sglang.harness.abi import KernelLibrary, Launcher
from astra_sglang.harness.check import NOT_COVERED, Checker
from astra_sglang.harness.inputs import OpArgs, allocate, fill
from astra_sglang.harness.records import EvalRequest, ShapeResult
from astra_sglang.harness.timing import Ceilings, blame, eager_us, interleaved, ratio_median, rotation_sets, summarize
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


class GpuSession:
    def __init__(self, spec: KernelSpec, candidate_lib: str, baseline_lib: str, probes_lib: str, req: EvalRequest):
        self.spec, self.req = spec, req
        self.faults = {(tuple(f.shape), f.dtype): f.reason for f in req.baseline_faults}
        self.device = torch.device("cuda", torch.cuda.current_device())
        nt, ns = len(spec.tensor_args), len(spec.scalar_args)
        self.candidate = Launcher(KernelLibrary(candidate_lib), nt, ns)
        self.baseline = python_op(spec, baseline_lib) if baseline_lib.startswith("py:") else Launcher(
            KernelLibrary(baseline_lib), nt, ns)
        # A non-blocking side stream: work a kernel puts on the legacy default stream is not ordered with it.
        self.stream = torch.cuda.Stream(device=self.device)
        with torch.cuda.stream(self.stream):
            ceilings = Ceilings(probes_lib)
        self.gpu = torch.cuda.get_device_name(self.device)
        self.roofline, self.empty_us = ceilings.roofline_gbps, ceilings.empty_us

    def evaluate_shape(self, shape: tuple[int, ...], dtype: str, progress) -> ShapeResult:
        row = ShapeResult(shape=shape, dtype=dtype, min_bytes=self.spec.min_bytes(shape, dtype))
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

    def _runner(self, launcher: Launcher):
        return lambda args: launcher(args.tensors, args.scalars)

    def _check(self, row: ShapeResult, shape, dtype) -> None:
        seed = self.req.seed * 7919 + zlib.crc32(repr((shape, dtype)).encode()) % 100_000
        cand, base = self._runner(self.candidate), self._runner(self.baseline)
        verdict = blame("candidate", lambda: Checker(self.spec, shape, dtype, self.device, seed).run(
            cand, self.req.edge_cases))
        row.correct = verdict.ok if verdict.covered else None
        row.reason, row.max_err_ratio = verdict.reason, verdict.err_ratio if verdict.covered else None
        if not verdict.covered:
            row.covered = False
            return
        fault = self.faults.get((tuple(shape), dtype))
        if fault:  # an earlier child's context died in the original here: the reference alone judges
            row.baseline_defect = f"{BASELINE_CRASHED} ({fault})"
            return
        base_verdict = blame("baseline", lambda: Checker(self.spec, shape, dtype, self.device, seed).run(
            base, self.req.edge_cases))
        if not base_verdict.ok:
            row.baseline_defect = base_verdict.reason
        elif verdict.ok:
            agree = Checker(self.spec, shape, dtype, self.device, seed + 1).agreement(cand, base)
            if not agree.ok:
                row.correct, row.reason = False, agree.reason

    def _time(self, row: ShapeResult, shape, dtype) -> None:
        gen = torch.Generator(device=self.device).manual_seed(1234)
        one = allocate(self.spec, shape, dtype, self.device)
        sets: list[OpArgs] = [fill(self.spec, one, gen)]
        for _ in range((rotation_sets(one.nbytes()) if self.req.l2 == "cold" else 1) - 1):
            sets.append(fill(self.spec, allocate(self.spec, shape, dtype, self.device), gen))

        def fn(launcher: Launcher):
            return lambda i: launcher(sets[i].tensors, sets[i].scalars)

        fns = {"candidate": fn(self.candidate)}
        if not row.baseline_defect.startswith((NOT_COVERED, BASELINE_CRASHED)):  # nothing to compare with
            fns["baseline"] = fn(self.baseline)
        samples = interleaved(fns, len(sets))
        row.candidate = summarize(samples["candidate"])
        if "baseline" in samples:
            row.baseline = summarize(samples["baseline"])
            row.speedup = ratio_median(samples["baseline"], samples["candidate"])
        row.gbps = row.min_bytes / row.candidate.median_us / 1e3
        row.pct_roofline = 100.0 * row.gbps / self.roofline
        row.floor_us = max(row.min_bytes / self.roofline / 1e3, self.empty_us)
        row.eager_candidate_us = blame("candidate", lambda: eager_us(fn(self.candidate), len(sets)))
        if row.baseline:
            row.eager_baseline_us = blame("baseline", lambda: eager_us(fn(self.baseline), len(sets)))
