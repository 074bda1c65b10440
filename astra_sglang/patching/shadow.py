"""Sampled shadow validation of a patched op: run the kernel and the original on copies, time both, compare
every written tensor within the spec's tolerance, and disable the patch in this process on a mismatch. A
mixin of PatchedOp (launcher, stats, spec, disable, fallbacks come from there)."""
from __future__ import annotations

import time

import torch

from astra_sglang.harness.abi import ASTRA_OK, ASTRA_UNSUPPORTED
from astra_sglang.harness.limits import FP8_TOLERANCE
from astra_sglang.specs.dtypes import INTEGERS
from astra_sglang.specs.records import Tolerance

CHUNK = 1 << 22
"""Elements compared at once (fp64: 64 MiB for both operands)."""


class ShadowCheck:
    def _shadow(self, values, tensors, scalars, args, kwargs):
        clones = [v.clone() if isinstance(v, torch.Tensor) else v for v in values]
        on_gpu = tensors[0].is_cuda
        if on_gpu:
            if self._events is None:
                self._events = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
            e0, e1, e2 = self._events
            e0.record()
        t0 = time.perf_counter()
        code = self.launcher(tensors, scalars)
        t1 = time.perf_counter()
        if on_gpu:
            e1.record()
        if code != ASTRA_OK:
            if code != ASTRA_UNSUPPORTED:
                self.disable(f"kernel launch returned cudaError {code}")
            return self._fallback(values, args, kwargs, reason="kernel declined (ASTRA_UNSUPPORTED)")
        self.stats.kernel_calls += 1
        self.stats.shadow_checks += 1
        self.call_original_into(clones)
        t2 = time.perf_counter()
        if on_gpu:
            e2.record()
            e2.synchronize()
            self.stats.add_timing(e0.elapsed_time(e1) * 1e3, e1.elapsed_time(e2) * 1e3)
        else:
            self.stats.add_timing((t1 - t0) * 1e6, (t2 - t1) * 1e6)
        bad = [self._mismatch(values[i], clones[i], self.spec.arguments[i].name) for i in self._mutated]
        bad = [b for b in bad if b]
        if bad:
            self.stats.shadow_mismatches += 1
            for i in self._mutated:  # this call returns the original's result
                values[i].copy_(clones[i])
            shape = "x".join(map(str, tensors[0].shape))
            self.disable(f"shadow mismatch vs the original at {shape} {tensors[0].dtype}: {'; '.join(bad)}")
        return self._result(values)

    def _mismatch(self, ours: torch.Tensor, theirs: torch.Tensor, name: str) -> str:
        """'' when every element is within the spec's tolerance for that tensor's dtype. Where the original
        is NaN (e.g. sgl-kernel's 0/0 when both LSEs are -inf) the element is not judged: a baseline defect.
        Compared in fp64 chunks of CHUNK elements: whole-tensor fp64 copies of a large activation (8192 x
        28672) would take ~3.8 GB of the serving GPU's memory at the sampled call."""
        dtype = str(ours.dtype).removeprefix("torch.")
        if dtype in INTEGERS:  # indices, counts, flags: exact
            bad = int((ours != theirs).sum())
            return f"{name}: {bad} of {ours.numel()} elements differ (compared exactly)" if bad else ""
        tol = self.spec.tolerance.get(dtype)
        if tol is None and dtype in FP8_TOLERANCE:
            tol = Tolerance(atol=FP8_TOLERANCE[dtype][0], rtol=FP8_TOLERANCE[dtype][1])
        if tol is None:
            return f"{name}: dtype {ours.dtype} has no tolerance"
        a_all, b_all = ours.reshape(-1), theirs.reshape(-1)
        chunks = [(i, min(i + CHUNK, b_all.numel())) for i in range(0, b_all.numel(), CHUNK)]
        # The spec's atol is set for unit-scale test data; live activations can be far smaller (dummy
        # weights: ~1e-6), where a fixed atol would pass any output. Scale it to the tensor's magnitude.
        peak = None
        for i, j in chunks:
            b = b_all[i:j].double()
            finite = b[torch.isfinite(b)].abs()
            if finite.numel():
                peak = max(peak or 0.0, float(finite.max()))
        atol = tol.atol * min(1.0, peak) if peak is not None else tol.atol
        bad, worst = 0, 0.0
        for i, j in chunks:
            a, b = a_all[i:j].double(), b_all[i:j].double()
            allowed = atol + tol.rtol * b.abs()
            ok = ((a - b).abs() <= allowed) | (a == b) | torch.isnan(b)
            if not bool(ok.all()):
                bad += int((~ok).sum())
                worst = max(worst, ((a - b).abs() / allowed).nan_to_num(float("inf")).max().item())
        if not bad:
            return ""
        return f"{name}: {bad} of {b_all.numel()} elements off (worst {worst:.3g}x tolerance)"
