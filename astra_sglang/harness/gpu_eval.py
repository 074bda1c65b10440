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
import random
import zlib

import torch

from astra_sglang.errors import describe
from astra_sglang.harness.abi import ASTRA_REPLACED, KernelLibrary, Launcher
from astra_sglang.harness.arena import Arena, set_bytes
from astra_sglang.harness.budget import device_ledger
from astra_sglang.harness.check import NOT_COVERED, Checker
from astra_sglang.harness.compare import precision_verdict
from astra_sglang.harness.cost import shape_cost
from astra_sglang.harness.limits import COMPUTE_MARGIN, FLOOR_MARGIN, ROOFLINE_MARGIN
from astra_sglang.harness.records import EvalRequest, ShapeResult
from astra_sglang.harness.integrity import Integrity
from astra_sglang.harness.sandwich import Sandwich
from astra_sglang.harness.timed import TimedSets
from astra_sglang.harness.timed_run import TimedRun
from astra_sglang.harness.timing import Ceilings, blame, plan_sets, ratio_median, summarize
from astra_sglang.specs.records import KernelSpec
from astra_sglang.specs.registry import served_shapes


def python_op(spec: KernelSpec, path: str):
    """A Python callable behind the Launcher interface: fn(*spec-ordered args); ABI code 0.

    The callable is handed views of the harness's tensors, not the tensors themselves: replacing a view's storage
    (`out.set_(...)`, `out.data = ...`) or its class (a lazily computed tensor) leaves the harness's buffers as
    they were, and is reported as such (ASTRA_REPLACED) rather than judged through the replaced object."""
    module, _, name = path.removeprefix("py:").rpartition(":")
    fn = getattr(importlib.import_module(module), name)
    kinds = [a.kind for a in spec.arguments]

    def refused(exc: Exception) -> int:
        # what the op raised, for the row's reason: a refusal and a broken call (an adapter's TypeError) look
        # alike from here, and only the text tells them apart
        launch.refusal = describe(exc)
        return -1

    def launch(tensors, scalars) -> int:
        handed = [t.detach() for t in tensors]
        ts, ss = iter(handed), iter(scalars)
        try:
            fn(*[next(ts) if k == "tensor" else next(ss) for k in kinds])
        except (ValueError, TypeError, NotImplementedError, AssertionError) as exc:
            return refused(exc)  # the original op refuses this shape/dtype (e.g. alignment): it does not cover it
        except RuntimeError as exc:
            if "CUDA" in str(exc):  # a device fault: the context is gone, let the worker report it
                raise
            return refused(exc)  # a dispatch refusal such as "failed to dispatch data type Float"
        for t, h in zip(tensors, handed):
            if type(h) is not type(t) or h.data_ptr() != t.data_ptr() or h.stride() != t.stride():
                return ASTRA_REPLACED
        return 0

    launch.refusal = ""  # the last refusal's exception, "Type: message"
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


CHECK_SETS = 4
"""Argument sets a check-only shape takes (the trials cycle through them; the first two stay apart)."""


class GpuSession:
    def __init__(self, spec: KernelSpec, candidate_lib: str, baseline_lib: str, probes_lib: str, req: EvalRequest):
        self.spec, self.req = spec, req
        self.faults = {(tuple(f.shape), f.dtype): f.reason for f in req.baseline_faults}
        self.device = torch.device("cuda", torch.cuda.current_device())
        self.ledger = device_ledger(self.device)
        self.ledger.join()
        # One non-blocking stream for the checks, the captures and the eager calls alike; work a kernel puts on
        # the legacy default stream is not ordered with it.
        self.stream = torch.cuda.Stream(device=self.device)
        with torch.cuda.stream(self.stream):  # before any candidate code is loaded
            ceilings = Ceilings(probes_lib)
            # Only where the cost model counts FLOPs: the probe costs ~0.1 s and 400 MB.
            self.tflops = ceilings.measure_matmul() if spec.cost else None
        # The baseline first: what a Python candidate's import changes is then the candidate's doing.
        self.baseline = self._launcher(baseline_lib)
        self.integrity = Integrity() if candidate_lib.startswith("py:") else None
        self.candidate = self._launcher(candidate_lib)
        self.gpu = torch.cuda.get_device_name(self.device)
        self.roofline, self.empty_us = ceilings.roofline_gbps, ceilings.empty_us
        self.l2 = torch.cuda.get_device_properties(self.device).L2_cache_size
        # Read before every cold replay: twice the L2, so that none of the preparation's writes stay in it.
        self.flush = torch.zeros(2 * self.l2, dtype=torch.uint8, device=self.device) if req.l2 == "cold" else None
        self.served = set(served_shapes(spec))

    def close(self) -> None:
        self.ledger.leave()

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
            arena, rng = self._arena(row, shape, dtype)
            if self.req.check:  # with hot L2 the sets share their inputs: the trials take buffers of their own
                self._check(row, shape, dtype, arena if not arena.shared else None)
            if self.req.time and row.correct is not False and row.covered:
                progress(stage="time", shape=shape, dtype=dtype)
                blame("timing", lambda: self._time(row, arena, rng))
            del arena
            self.ledger.release()
            if self._placed(shape) and row.correct is not False and row.covered and row.candidate and row.baseline:
                progress(stage="sandwich", shape=shape, dtype=dtype)
                blame("sandwich", lambda: self._sandwich(row, shape, dtype))
        changed = self.integrity.changed() if self.integrity else ""
        if changed:  # a Python candidate patched what the harness measures or judges with
            row.correct, row.candidate, row.speedup, row.sandwich = False, None, None, None
            row.reason = f"changed the harness's own {changed} (a Python candidate may not patch the evaluator)"
        gc.collect()
        torch.cuda.empty_cache()
        return row

    def _runner(self, launcher):
        return lambda args: launcher(args.tensors, args.scalars)

    def _seed(self, shape, dtype) -> int:
        return self.req.seed * 7919 + zlib.crc32(repr((shape, dtype)).encode()) % 100_000

    def _arena(self, row: ShapeResult, shape, dtype) -> tuple[Arena, random.Random]:
        """The shape's argument sets, as many as the timing needs (timing.plan_sets) within this GPU's shared
        memory budget (harness/budget.py), at least two."""
        rng = random.Random(self._seed(shape, dtype))
        hot = self.req.l2 == "hot"
        shared = frozenset(i for i, a in enumerate(self.spec.tensor_args) if a.role == "in") if hot else frozenset()
        per_set = set_bytes(self.spec, shape, dtype, shared)
        floor = max(self.empty_us, row.min_bytes / self.roofline / 1e3,
                    row.flops / self.tflops / 1e6 if row.flops and self.tflops else 0.0)
        want = (plan_sets(per_set, floor, 1 << 62, random.Random(0)) * 9 // 8 + 2) * per_set \
            if self.req.time else CHECK_SETS * per_set
        budget = self.ledger.grant(want, torch.cuda.mem_get_info(self.device)[0], least=2 * per_set)
        count = plan_sets(per_set, floor, budget, rng) + 1 if self.req.time else CHECK_SETS
        count = max(2, min(count, budget // max(per_set, 1)))
        return Arena(self.spec, shape, dtype, self.device, count, shared), rng

    def _check(self, row: ShapeResult, shape, dtype, arena: Arena | None) -> None:
        seed = self._seed(shape, dtype)
        cand, base = self._runner(self.candidate), self._runner(self.baseline)
        verdict = blame("candidate", lambda: Checker(self.spec, shape, dtype, self.device, seed, arena).run(
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
        # The same seed: the original meets the very inputs, pre-states and buffers the candidate met.
        base_verdict = blame("baseline", lambda: Checker(self.spec, shape, dtype, self.device, seed, arena).run(
            base, self.req.edge_cases))
        if not base_verdict.ok:
            refusal = getattr(self.baseline, "refusal", "") if not base_verdict.covered else ""
            row.baseline_defect = f"{base_verdict.reason} ({refusal})" if refusal else base_verdict.reason
            return
        row.baseline_err_rms = base_verdict.rms
        if not verdict.ok:
            return
        # against an oracle (the original op itself) the original's own error is its run-to-run noise: the
        # tolerance the first GPU run derived stands in for the precision comparison
        worse = precision_verdict(verdict, base_verdict) if self.spec.reference_dtype != "op" else ""
        if worse:
            row.correct, row.reason = False, worse
            return
        agree = Checker(self.spec, shape, dtype, self.device, seed + 1, arena).agreement(cand, base)
        if not agree.ok:
            row.correct, row.reason = False, agree.reason

    def _time(self, row: ShapeResult, arena: Arena, rng: random.Random) -> None:
        hot = self.req.l2 == "hot"
        sets = TimedSets(arena, seed=rng.randrange(1 << 30))

        def fn(launcher):
            return lambda i: launcher(sets.arena.args(i).tensors, sets.arena.args(i).scalars)

        fns = {"candidate": fn(self.candidate)}
        if not row.baseline_defect.startswith((NOT_COVERED, BASELINE_CRASHED)):  # nothing to compare with
            fns["baseline"] = fn(self.baseline)
        run = TimedRun(sets, fns, rng, self.flush)
        samples, wrong = run.graphs()
        row.launches = len(run.orders[0])
        row.candidate = summarize(samples["candidate"])
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
        row.eager_candidate_us, wrong = blame("candidate", lambda: run.eager("candidate", check=True))
        wrong = wrong or physics(row, self.roofline, 0.0, hot, row.eager_candidate_us, "a call, eager", self.tflops)
        if wrong:
            row.correct, row.reason, row.candidate, row.speedup, row.eager_candidate_us = False, wrong, None, None, None
            return
        if row.baseline:
            row.eager_baseline_us = blame("baseline", lambda: run.eager("baseline", check=False))[0]

    def _placed(self, shape) -> bool:
        """Whether the request times this shape in place too."""
        return self.req.sandwich == "any" or (self.req.sandwich == "served" and tuple(shape) in self.served)

    def _sandwich(self, row: ShapeResult, shape, dtype) -> None:
        """The op between its model neighbours (harness/sandwich.py), where the spec names them."""
        sandwich = Sandwich.for_shape(self.spec, shape, dtype, self.device, self.ledger)
        if sandwich is None:
            return
        timing, wrong = sandwich.run(self._runner(self.candidate), self._runner(self.baseline),
                                     random.Random(self._seed(shape, dtype)))
        if wrong:
            row.correct, row.reason, row.candidate, row.speedup = False, wrong, None, None
        row.sandwich = timing
