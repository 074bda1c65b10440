"""A patched op: SGLang's calling convention in front, the kernel library (C ABI) behind, the original as
fallback and as the sampled shadow reference.

Two paths share one core:
- eager (the normal case, and CUDA-graph capture): with a real kernel library and verification off, a
  C++ FastOp (fastcall.cpp) serves every call of a shape whose coverage verdict it holds; the Python
  core computes verdicts, and serves everything else, calling the launcher with ctypes. No torch
  dispatcher in between either way, because SGLang's own ops cost only 5-12 us per call;
- under torch.compile the same function routes to the custom op `torch.ops.astra.<op>`, whose schema
  declares every out / in-place argument as mutated and whose fake implementation does nothing, so
  dynamo never traces into ctypes and functionalization knows what the kernel writes.
Anything the kernel does not cover (dtype, shape, device, spec constraint, ASTRA_UNSUPPORTED) is served
by the original callable, and so is what the manifest's `defer` leaves to it (sizes where SGLang's kernel
measured as fast as ours): the C++ path calls the original itself there.
"""
from __future__ import annotations

import importlib
import inspect
import logging
import random
from typing import Callable, Sequence

import torch

from astra_sglang.harness.abi import ASTRA_OK, ASTRA_UNSUPPORTED
from astra_sglang.harness.inputs import TORCH_DTYPES
from astra_sglang.patching import fastcall
from astra_sglang.patching.binding import ArgumentBinding
from astra_sglang.patching.custom_op import ACTIVE, register_custom_op
from astra_sglang.patching.shadow import ShadowCheck
from astra_sglang.patching.stats import OpStats
from astra_sglang.patchset.manifest import Defer
from astra_sglang.specs.records import KernelSpec, compile_dim, dim_names

log = logging.getLogger("astra_sglang.patching")

MAX_VERDICTS = 4096
# Coverage verdicts, cached per (shape, strides, dtype) and shared with the C++ fast path (same numbers there).
UNCOVERED, COVERED, DEFERRED = 0, 1, 2

LauncherLike = Callable[[Sequence[torch.Tensor], Sequence[float]], int]
"""`harness.abi.Launcher` (ctypes) or a stand-in: (tensors, scalars) -> ABI code."""

_is_compiling = torch.compiler.is_compiling


def _capturing() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def _signature(fn: Callable) -> inspect.Signature | None:
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):  # builtins and torch ops: the spec's convention is assumed
        return None


def _import(path: str) -> Callable:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def _returns_nothing(fn: Callable) -> bool:
    """Whether the original declares `-> None` (SGLang's topk_softmax writes the weights and ids its caller hands
    in and returns nothing): then the patched call returns None too, whatever outputs the spec names."""
    sig = _signature(fn)
    return sig is not None and sig.return_annotation in (None, "None")


def _takes_all_positionally(fn: Callable, count: int, outputs: Sequence[str] = ()) -> bool:
    """flashinfer's merge_state(v_a, s_a, v_b, s_b) returns its outputs instead of writing them: told by the
    outputs' names where the signature has names, else by `count`, the spec's arguments not keyword-only."""
    sig = _signature(fn)
    if sig is None:
        return True
    params = sig.parameters.values()
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return True
    if outputs and all(name in sig.parameters for name in outputs):  # silu_and_mul(input, out=None)
        return True
    if outputs and not any(name in sig.parameters for name in outputs):  # SGLang's quant: allocates, returns
        return False
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params) >= count


class PatchedOp(ArgumentBinding, ShadowCheck):
    def __init__(self, spec: KernelSpec, launcher: LauncherLike, original: Callable, stats: OpStats, *,
                 dtypes: Sequence[str] | None = None, verify_rate: float = 0.0, device_type: str = "cuda",
                 seed: int | None = None, defer: Defer | None = None, max_bytes: int | None = None):
        self.spec, self.launcher, self.original, self.stats = spec, launcher, original, stats
        self.verify_rate = float(verify_rate)
        self._fast = None
        self.active = True
        self._cuda = device_type == "cuda"
        self._dtypes = {TORCH_DTYPES[d] for d in (dtypes or spec.dtypes)}
        self._defer_bytes = defer.min_bytes if defer else None
        self._defer_rows = defer.below_rows if defer else None
        self._defer_dtypes = {TORCH_DTYPES[d] for d in defer.dtypes} if defer and defer.dtypes else self._dtypes
        self._defer_multiple = defer.multiple_of if defer else 1
        self._max_bytes = max_bytes  # the manifest's gate_max_bytes: larger calls were never checked
        self._random = random.Random(seed).random
        self._shadowed: set = set()
        args = spec.arguments
        self._n = len(args)
        self._index = {a.name: i for i, a in enumerate(args)}
        self._tidx = [i for i, a in enumerate(args) if a.kind == "tensor"]
        self._sidx = [i for i, a in enumerate(args) if a.kind == "scalar"]
        self._t_first = next((k for k, i in enumerate(self._tidx) if args[i].dtype == "T"), 0)  # its dtype is T
        self._defaults = [(i, a.default) for i, a in enumerate(args) if a.kind == "scalar"]
        self._outs = [i for i, a in enumerate(args) if a.role == "out"]
        self._mutated = [i for i, a in enumerate(args) if a.kind == "tensor" and a.role != "in"]
        self._ins = [i for i, a in enumerate(args) if a.role != "out"]
        self._shapes = [[compile_dim(e) for e in a.shape] for a in args]
        named = set(spec.all_dim_names)
        self._names_in = [[e if isinstance(e, str) and e in named else None for e in a.shape] for a in args]
        self._kw = [i for i, a in enumerate(args) if a.keyword]
        self._pos = [i for i, a in enumerate(args) if not a.keyword]
        self._optional = [i for i, a in enumerate(args) if a.kind == "tensor" and a.optional and a.role != "out"]
        self._signature = _signature(original)
        self._plans: dict[tuple, tuple | str] = {}  # binding.py: a call form's binding, planned once
        self._scalar_dims = [(i, a.dim) for i, a in enumerate(args) if a.dim]
        self.last_miss = ""
        self._uses = [[dim_names(e) for e in a.shape] for a in args]
        # An output shaped and typed like an input (v_merged like v_a) is allocated without solving dims.
        self._like = {i: next((j for j in self._tidx if args[j].role != "out" and args[j].shape == args[i].shape
                               and args[j].dtype == args[i].dtype), None) for i in self._outs}
        self._allocators = {i: _import(a.allocate) for i, a in enumerate(args) if a.allocate}
        self._orig_takes_all = _takes_all_positionally(original, len(self._pos), [args[i].name for i in self._outs])
        self._returns = bool(self._outs) and not _returns_nothing(original)  # what `_result` hands back
        self._verdicts: dict[tuple, int] = {}
        self._launch_keyed = getattr(launcher, "launch_keyed", None)  # harness.abi.Launcher; stand-ins lack it
        self._events = None
        register_custom_op(spec)
        ACTIVE[spec.name] = self
        if not self.verify_rate:  # shadow checks need the Python path on every call
            self._fast = fastcall.fast_op(spec, launcher, self._like, self._cuda, original)
        if self._fast is not None:
            stats.native.append(self._fast)
        self.fn = self._make_fn()

    @property
    def active(self) -> bool:
        return self._active

    @active.setter
    def active(self, value: bool) -> None:
        self._active = bool(value)
        if self._fast is not None:
            self._fast.active = int(self._active)

    # ---- the patched function -------------------------------------------------------------------------
    def _make_fn(self) -> Callable:
        op, stats, original, fast = self, self.stats, self.original, self._fast
        miss = fastcall.load().MISS if fast is not None else None  # a FastOp exists only where load() did
        returns = self._returns  # False: the original returns None, and so must the patched call

        def patched(*args, **kwargs):
            if _is_compiling():
                return op._compiled(args, kwargs)
            if fast is not None:
                if not kwargs:
                    result = fast(*args)
                else:  # SGLang's keyword calls (rope): bound by the call form's plan, then served in C++
                    values = op._bind_signature(args, kwargs) if op._signature is not None else None
                    result = fast.bound(tuple(values), args, kwargs) if values is not None else miss
                if result is not miss:
                    return result if returns else None
                if fast.last_error:
                    op.disable(f"kernel launch returned cudaError {fast.last_error}")
                    fast.last_error = 0
            stats.calls += 1
            if not op.active:
                stats.fallback("patch disabled")
                return original(*args, **kwargs)
            values = op._bind(args, kwargs)
            if values is None:
                stats.fallback(op.last_miss)
                return original(*args, **kwargs)
            return op._core(values, args, kwargs)

        for attr in ("__name__", "__qualname__", "__doc__", "__module__"):
            try:
                setattr(patched, attr, getattr(original, attr))
            except (AttributeError, TypeError):
                pass
        patched.__wrapped__ = original
        patched.__astra_op__ = self
        return patched

    def around(self, original: Callable, *args, **kwargs):
        """SGLang HookRegistry AROUND hook: handed the original, which this op already holds."""
        return self.fn(*args, **kwargs)

    def disable(self, reason: str) -> None:
        self.active = False
        self.stats.disabled_reason = reason
        log.error("astra-sglang: patch %s disabled in this process: %s", self.spec.name, reason)

    # ---- core -----------------------------------------------------------------------------------------
    def _core(self, values: list, args: tuple | None, kwargs: dict | None):
        """`values` bound; `args`/`kwargs` the caller's call for the eager fallback, or None inside the custom
        op (then the original writes into `values`)."""
        tensors = [values[i] for i in self._tidx]
        if tensors[0].is_cuda is not self._cuda:
            return self._fallback(values, args, kwargs, reason="device")
        key = tuple([(t.shape, t.stride(), t.dtype) for t in tensors])  # also the launcher's descriptor key
        verdict = self._verdicts.get(key)
        if verdict is None:
            if len(self._verdicts) >= MAX_VERDICTS:
                self._verdicts.clear()
                self._shadowed.clear()
                if self._fast is not None:
                    self._fast.forget()
            verdict = self._verdicts[key] = self._coverage(tensors)
            if self._fast is not None:
                self._fast.remember(tensors, verdict)
        if verdict != COVERED:
            return self._fallback(values, args, kwargs, deferred=verdict == DEFERRED,
                                  reason="dtype or shape not covered")
        scalars = [values[i] for i in self._sidx]
        if self.verify_rate:
            # A kernel captured into a CUDA graph keeps running after a later mismatch disables the patch,
            # so with verification on, a shape goes into a graph only once it passed a shadow check; the
            # first eager call of every shape is checked (SGLang's warm-up runs precede each capture).
            if _capturing():
                if key not in self._shadowed:
                    return self._fallback(values, args, kwargs, reason="captured before a shadow check")
            elif key not in self._shadowed or self._random() < self.verify_rate:
                result = self._shadow(values, tensors, scalars, args, kwargs)
                if self.active:
                    self._shadowed.add(key)
                return result
        code = self._launch_keyed(key, tensors, scalars) if self._launch_keyed else self.launcher(tensors, scalars)
        if code == ASTRA_OK:
            self.stats.kernel_calls += 1
            return self._result(values)
        if code != ASTRA_UNSUPPORTED:
            self.disable(f"kernel launch returned cudaError {code}")
        return self._fallback(values, args, kwargs, reason="kernel declined (ASTRA_UNSUPPORTED)"
                              if code == ASTRA_UNSUPPORTED else "kernel launch failed")

    def _coverage(self, tensors: list) -> int:
        """COVERED, UNCOVERED (the spec or the patch's dtypes exclude it, or it is larger than any call the
        acceptance gate checked) or DEFERRED (the manifest's `defer`)."""
        if not self._verdict(tensors):
            return UNCOVERED
        if self._max_bytes is not None and sum(t.numel() * t.element_size() for t in tensors) > self._max_bytes:
            return UNCOVERED
        first = tensors[self._t_first]
        if first.dtype in self._defer_dtypes and first.shape[-1] % self._defer_multiple == 0 and (
                (self._defer_bytes is not None and sum(t.numel() * t.element_size() for t in tensors)
                 >= self._defer_bytes)
                or (self._defer_rows is not None and first.dim() and first.shape[0] < self._defer_rows)):
            return DEFERRED
        return COVERED

    def run_values(self, values: list) -> None:
        """The custom op's implementation (compiled graphs): same core, results written into `values`."""
        self.stats.calls += 1
        if not self.active:
            self.stats.fallback("patch disabled")
            self.call_original_into(values)
            return
        self._core(values, None, None)

    def _compiled(self, args: tuple, kwargs: dict):
        values = self._bind(args, kwargs)
        if values is None:
            return self.original(*args, **kwargs)
        getattr(torch.ops.astra, self.spec.name)(*values)
        return self._result(values)

    def _result(self, values: list):
        """What the original returns: the outputs (one tensor or a tuple); None for in-place-only ops and for an
        original that declares `-> None` (it writes outputs its caller passes)."""
        if not self._returns:
            return None
        if len(self._outs) == 1:
            return values[self._outs[0]]
        return tuple(values[i] for i in self._outs)

    def _fallback(self, values: list, args: tuple | None, kwargs: dict | None, deferred: bool = False,
                  reason: str = "not covered"):
        if deferred:
            self.stats.deferred += 1
        else:
            self.stats.fallback(reason)
        if args is not None:
            return self.original(*args, **(kwargs or {}))
        self.call_original_into(values)
        return None

    def call_original_into(self, values: list) -> None:
        """Run the original so that its results land in `values` (spec convention)."""
        keywords = {self.spec.arguments[i].name: values[i] for i in self._kw}
        if self._orig_takes_all:
            self.original(*[values[i] for i in self._pos], **keywords)
            return
        result = self.original(*[values[i] for i in self._ins if i not in self._kw], **keywords)
        for i, r in zip(self._outs, result if isinstance(result, (tuple, list)) else (result,)):
            values[i].copy_(r)
