"""Binding a patched op's call to the spec's arguments: SGLang's positional/keyword call in spec order (bound
by the original's own signature where it has one, so keyword-only and defaulted parameters land where they
belong), defaults filled, missing outputs allocated, and the coverage verdict (dims consistent, dtype patched,
the spec's constraints hold) for a set of tensors. A mixin of PatchedOp, which sets the fields used here."""
from __future__ import annotations

import torch

from astra_sglang.harness.inputs import TORCH_DTYPES

IGNORED_KWARGS = frozenset({"enable_pdl"})
"""Launch hints of sgl_kernel entry points: our kernels decide such things themselves."""


class _Source:
    """Where a bound parameter's value comes from in a call: args[key] or kwargs[key]."""

    __slots__ = ("by_name", "key")

    def __init__(self, by_name: bool, key):
        self.by_name, self.key = by_name, key


class ArgumentBinding:
    def _miss(self, reason: str) -> None:
        self.last_miss = reason
        return None

    def _bind_signature(self, args: tuple, kwargs: dict) -> list | None:
        """By the original's signature: parameters the spec does not name must hold their default (or None:
        SGLang's `fused_args=None`) or be a known launch hint; anything else is served by the original.
        Where a parameter lands depends only on how many positional arguments and which keywords the call
        has, so Signature.bind runs once per such call form and its plan is kept: binding SGLang's all-keyword
        rope call went from 5.9 to 1.2 us (CPU, 2026-11-25, benchmarks/launcher_overhead.py)."""
        key = (len(args), tuple(kwargs))
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = self._plan(len(args), tuple(kwargs))
        if isinstance(plan, str):
            return self._miss(plan)
        values = [None] * self._n
        for i, by_name, src in plan[0]:
            values[i] = kwargs[src] if by_name else args[src]
        for by_name, src, name, default in plan[1]:
            val = kwargs[src] if by_name else args[src]
            if not (val is None or val is default):
                return self._miss(f"argument {name} (not in the spec) given")
        return values

    def _plan(self, n_args: int, names: tuple) -> tuple | str:
        """(spec slots: (index, by name, source), checks: (by name, source, name, default)) for one call form,
        or the miss reason every call of that form gets."""
        params = self._signature.parameters
        kept = [k for k in names if k not in IGNORED_KWARGS or k in params]
        try:
            bound = self._signature.bind(*[_Source(False, j) for j in range(n_args)],
                                         **{k: _Source(True, k) for k in kept})
        except TypeError as exc:
            return f"call does not fit the original's signature: {exc}"
        slots, checks = [], []
        for name, value in bound.arguments.items():
            param = params[name]
            if param.kind is param.VAR_POSITIONAL:
                if value:
                    return f"argument {name} (not in the spec) given"
                continue
            extra = value.items() if param.kind is param.VAR_KEYWORD else [(name, value)]
            for key, src in extra:
                if key in self._index:
                    slots.append((self._index[key], src.by_name, src.key))
                elif key not in IGNORED_KWARGS:
                    default = params[key].default if key in params else None
                    checks.append((src.by_name, src.key, key, default))
        return slots, checks

    def _bind(self, args: tuple, kwargs: dict) -> list | None:
        """The caller's arguments in spec order, defaults filled and missing outputs allocated; None (reason in
        `last_miss`) when the call uses something the spec does not describe."""
        n = self._n
        if not kwargs and len(args) == n:
            values = list(args)
        elif self._signature is not None:
            values = self._bind_signature(args, kwargs)
            if values is None:
                return None
        else:
            if len(args) > n:
                return self._miss("more positional arguments than the spec has")
            values = list(args) + [None] * (n - len(args))
            for key, value in kwargs.items():
                i = self._index.get(key)
                if i is None:
                    if key in IGNORED_KWARGS:
                        continue
                    return self._miss(f"argument {key} (not in the spec) given")
                values[i] = value
        for i, default in self._defaults:
            if values[i] is None:
                values[i] = default
        for i in self._outs:
            if values[i] is None:
                j = self._like[i]
                if i in self._allocators:  # laid out by the call's scalars (column-major scales)
                    try:
                        values[i] = self._allocators[i](*[values[k] for k in self._ins])
                    except (AttributeError, TypeError, ValueError, IndexError):  # not the tensors it expects
                        return self._miss("output not allocatable (its allocator refused the inputs)")
                elif j is not None and isinstance(values[j], torch.Tensor):
                    # empty_like: ~1 us cheaper a call than torch.empty(shape, dtype=, device=); a strided
                    # (non-dense) source still gets a contiguous output.
                    values[i] = torch.empty_like(values[j])
                else:
                    values[i] = self._allocate(values, i)
                    if values[i] is None:
                        return self._miss("output not allocatable (dims not solvable from the inputs)")
        for i in self._tidx:
            if not isinstance(values[i], torch.Tensor):
                what = "optional tensor" if i in self._optional else "tensor"
                return self._miss(f"{what} {self.spec.arguments[i].name} not given as a tensor")
        return values

    def _dims(self, values: list) -> dict | None:
        """Solve the spec's dims from the given tensors (shape expressions are linear: "tokens", "2*d")."""
        dims: dict = {}
        for i, name in self._scalar_dims:  # group_size = group: the call's value is the dim's
            if isinstance(values[i], int):
                dims[name] = values[i]
        pending = []
        for i in self._tidx:
            t = values[i]
            if not isinstance(t, torch.Tensor):
                continue
            names = self._names_in[i]
            if t.dim() != len(names):
                return None
            for j, (name, size) in enumerate(zip(names, t.shape)):
                if name is not None:
                    if dims.setdefault(name, size) != size:
                        return None
                else:
                    pending.append((i, j, size))
        for i, j, size in pending:
            unknown = [d for d in self._uses[i][j] if d not in dims]
            if len(unknown) == 1:
                x, fn = unknown[0], self._shapes[i][j]
                try:
                    b = fn({**dims, x: 0})
                    a = fn({**dims, x: 1}) - b
                except ZeroDivisionError:  # "hidden // group": not solvable for group
                    continue
                if a == 0 or (size - b) % a != 0:
                    return None
                dims[x] = (size - b) // a
        for d in self.spec.dims:
            if d not in dims:
                return None
        return self.spec.with_free_dims(dims)

    def _allocate(self, values: list, i: int) -> torch.Tensor | None:
        dims = self._dims(values)
        if dims is None:
            return None
        arg = self.spec.arguments[i]
        like = values[self._tidx[0]]
        dtype = TORCH_DTYPES[arg.dtype] if arg.dtype != "T" else next(
            values[j].dtype for j in self._tidx if self.spec.arguments[j].dtype == "T" and values[j] is not None)
        return torch.empty([fn(dims) for fn in self._shapes[i]], dtype=dtype, device=like.device)

    def _verdict(self, tensors: list) -> bool:
        """Is this dtype/shape combination covered (spec dims consistent, dtype patched, constraints hold)?"""
        values: list = [None] * self._n
        for i, t in zip(self._tidx, tensors):
            values[i] = t
        dims = self._dims(values)
        if dims is None or not self.spec.supports_dims(dims):
            return False
        t_dtypes = set()
        for i, t in zip(self._tidx, tensors):
            arg = self.spec.arguments[i]
            if tuple(t.shape) != tuple(fn(dims) for fn in self._shapes[i]):
                return False
            if arg.dtype != "T":
                if t.dtype != TORCH_DTYPES[arg.dtype]:
                    return False
            else:
                t_dtypes.add(t.dtype)
        return len(t_dtypes) == 1 and t_dtypes <= self._dtypes
