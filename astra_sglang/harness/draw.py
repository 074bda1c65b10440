"""Drawing an argument's values by its spec `init` kind, poisoning outputs, and changing one element of an
input (the caching check) without leaving the values the kind allows (an index stays below its bound, a
permutation stays one)."""
from __future__ import annotations

import importlib
import math
from dataclasses import dataclass

import torch

from astra_sglang.specs import dtypes as dt
from astra_sglang.specs import init as kinds
from astra_sglang.specs.exprs import eval_dim
from astra_sglang.specs.records import Argument

INT_POISON = {torch.int64: -0x5A5A5A5A5A5A5A5B, torch.int32: -0x5A5A5A5B, torch.int8: -0x5B, torch.uint8: 0xA5,
              torch.bool: True}
"""Integer outputs are poisoned with these instead of NaN: values no index or count takes."""
NAN_BITS = {torch.float64: 0x7FF5A5A5A5A5A5A5, torch.float32: 0x7FA5A5A5, torch.float16: 0x7EA5,
            torch.bfloat16: 0x7FA5, torch.float8_e5m2: 0x7D, torch.float8_e4m3fn: 0x7F}
"""Float outputs are poisoned with a NaN of this bit pattern: a payload no arithmetic produces (CUDA writes
0x7FFF / 0x7FFFFFFF for a NaN it computes), so a poisoned element still there was never written, and a NaN of
another pattern was computed by the kernel. fp8 e4m3 has one NaN pattern only: there `compare`'s snapshot of
the outputs before the call tells the two apart."""
BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bit patterns as integers (same storage, same strides)."""
    return t.view(BITS[t.element_size()]) if t.dtype != torch.bool else t


def bound(value, dims: dict[str, int]):
    """A bound of a range kind: a number, or a dim expression evaluated at this shape."""
    return eval_dim(value, dims) if isinstance(value, str) else value


def is_float(dtype: torch.dtype) -> bool:
    return dtype.is_floating_point


def poison(t: torch.Tensor) -> None:
    if is_float(t.dtype):
        bits(t).fill_(NAN_BITS[t.dtype])
    else:
        t.fill_(INT_POISON[t.dtype])


def poisoned(t: torch.Tensor) -> torch.Tensor:
    """Elementwise: the element holds the poison (device-side, no sync); never for bool, whose poison (True) is
    also a value."""
    if t.dtype == torch.bool:
        return torch.zeros_like(t)
    if is_float(t.dtype):
        return bits(t) == NAN_BITS[t.dtype]
    return t == INT_POISON[t.dtype]


def _rows(shape: tuple[int, ...]) -> tuple[int, int]:
    width = shape[-1] if shape else 1
    return (math.prod(shape) // width if width else 0), width


def _random_order(rows: int, n: int, gen: torch.Generator, device) -> torch.Tensor:
    """`rows` independent random permutations of 0..n-1 (int64, rows x n)."""
    return torch.rand((rows, n), generator=gen, device=device).argsort(dim=-1)


def values(arg: Argument, shape: tuple[int, ...], dtype: torch.dtype, gen: torch.Generator, device,
           dims: dict[str, int]) -> torch.Tensor:
    """Fresh values for `arg` (float32 or int64, cast by the caller's copy_)."""
    init = arg.init
    if isinstance(init, kinds.Normal):
        noise = torch.randn(shape, generator=gen, device=device, dtype=torch.float32) * init.std + init.mean
        if dtype == torch.bool:
            return noise > init.mean
        return noise if is_float(dtype) else noise.trunc()
    if isinstance(init, kinds.Uniform):
        low, high = float(bound(init.low, dims)), float(bound(init.high, dims))
        return torch.rand(shape, generator=gen, device=device) * (high - low) + low
    if isinstance(init, kinds.RandInt):
        low, high = int(bound(init.low, dims)), int(bound(init.high, dims))
        if high <= low:
            raise ValueError(f"{arg.name}: randint range [{low}, {high}) is empty at {dims}")
        return torch.randint(low, high, shape, generator=gen, device=device)
    if isinstance(init, kinds.Distinct):
        high = int(bound(init.high, dims))
        rows, width = _rows(shape) if init.per == "row" else (1, math.prod(shape))
        if width > high:
            raise ValueError(f"{arg.name}: {width} distinct values below {high} do not exist at {dims}")
        return _random_order(rows, high, gen, device)[:, :width].reshape(shape)
    if isinstance(init, kinds.Permutation):
        rows, width = _rows(shape)
        return _random_order(rows, width, gen, device).reshape(shape)
    if isinstance(init, kinds.Full):
        return torch.full(shape, init.value, device=device)
    if isinstance(init, kinds.Generator):
        module, _, name = init.function.partition(":")
        out = getattr(importlib.import_module(module), name)(shape, dtype, gen, dims)
        if tuple(out.shape) != tuple(shape):
            raise ValueError(f"{arg.name}: generator {init.function} returned shape {tuple(out.shape)}, "
                             f"not {tuple(shape)}")
        return out
    raise TypeError(f"unknown init kind {init!r}")


@dataclass
class Change:
    """One element of every row of a [rows, ...] tensor changed (two swapped, for kinds that must stay distinct):
    where, and the bit patterns before and after, so that it can be undone and told apart from a write."""

    index: tuple[torch.Tensor, ...]
    """An advanced index into the rows tensor (first entry: the row)."""
    old: torch.Tensor
    new: torch.Tensor

    def undo(self, rows: torch.Tensor) -> None:
        bits(rows)[self.index] = self.old

    def redo(self, rows: torch.Tensor) -> None:
        bits(rows)[self.index] = self.new

    def on_row(self, row: int, t: torch.Tensor) -> None:
        """Apply row `row`'s change to `t`, a tensor of one row's shape (the expected inputs of that row)."""
        if not hasattr(self, "_rows"):  # where each row's entries are, read back once (not a sync per row)
            self._rows: dict[int, list[tuple[int, tuple[int, ...]]]] = {}
            for entry, (r, *at) in enumerate(zip(*(i.tolist() for i in self.index))):
                self._rows.setdefault(r, []).append((entry, tuple(at)))
        for entry, at in self._rows.get(row, []):
            bits(t)[at] = self.new[entry]


def _positions(shape: tuple[int, ...], rows: int, gen: torch.Generator) -> list[torch.Tensor]:
    return [torch.randint(n, (rows,), generator=gen, device=gen.device) for n in shape]


def _swap(arg: Argument, rows_t: torch.Tensor, gen: torch.Generator) -> tuple | None:
    """Index pairs of neighbouring elements in every row (both keep a Distinct / Permutation kind valid)."""
    rows, shape = rows_t.shape[0], tuple(rows_t.shape[1:])
    row = torch.arange(rows, device=rows_t.device)
    if shape and shape[-1] >= 2:
        at = _positions(shape, rows, gen)
        other = [*at[:-1], (at[-1] + 1) % shape[-1]]
        return tuple(torch.cat([a, b]) for a, b in zip([row, *at], [row, *other]))
    init = arg.init
    if isinstance(init, kinds.Distinct) and init.per == "all" and math.prod(shape) > 1:
        first = [torch.zeros_like(row)] * len(shape)  # the first two elements in flat order
        second = list(torch.unravel_index(torch.ones_like(row), shape)) if shape else first
        return tuple(torch.cat([a, b]) for a, b in zip([row, *first], [row, *second]))
    return None


def perturb_rows(arg: Argument, rows_t: torch.Tensor, gen: torch.Generator, dims: dict[str, int]) -> Change | None:
    """Change one element of every row of input `rows_t` ([rows, *shape]) within its kind's values, in place
    (one launch for all rows), and return the change. Full and generator kinds are left as they are (None): no
    other value is known to be valid."""
    init, dtype = arg.init, rows_t.dtype
    if not rows_t.numel() or isinstance(init, (kinds.Full, kinds.Generator)):
        return None
    if isinstance(init, (kinds.Distinct, kinds.Permutation)):
        index = _swap(arg, rows_t, gen)
        if index is None:
            return None
        old = bits(rows_t)[index]
        half = old.shape[0] // 2
        change = Change(index, old, torch.cat([old[half:], old[:half]]))
        change.redo(rows_t)
        return change
    count = rows_t.shape[0]
    index = (torch.arange(count, device=rows_t.device), *_positions(tuple(rows_t.shape[1:]), count, gen))
    old = rows_t[index]
    step = torch.randn(count, generator=gen, device=gen.device).abs() + 1.0
    if isinstance(init, kinds.RandInt):
        low, high = int(bound(init.low, dims)), int(bound(init.high, dims))
        if high - low <= 1:
            return None
        new = low + (old.long() - low + step.long()) % (high - low)
    elif dtype == torch.bool:
        new = ~old
    elif not is_float(dtype):
        new = old.long() + step.long()
    elif isinstance(init, kinds.Uniform):
        low, high = float(bound(init.low, dims)), float(bound(init.high, dims))
        new = low + torch.remainder(old.float() - low + (high - low) * 0.37 * step, high - low)
    else:
        new = old.float() + step * (init.std or 1.0)
    new = new.to(dtype)
    if is_float(dtype):  # a step lost to rounding at a large magnitude: flip the sign instead
        new = torch.where(bits(new) == bits(old), (-(old.float()) - 1.0).to(dtype), new)
    change = Change(index, bits(old).clone(), bits(new).clone())
    change.redo(rows_t)
    return change


def perturb(arg: Argument, t: torch.Tensor, gen: torch.Generator, dims: dict[str, int]) -> None:
    """Change one element of input `t` (or swap two) within its kind's values: `perturb_rows` on one row."""
    perturb_rows(arg, t.unsqueeze(0), gen, dims)


def dtype_of(arg: Argument, dtype: str) -> torch.dtype:
    return dt.torch_dtype(arg.dtype_for(dtype))
