"""Drawing an argument's values by its spec `init` kind, poisoning outputs, and changing one element of an
input (the caching check) without leaving the values the kind allows (an index stays below its bound, a
permutation stays one)."""
from __future__ import annotations

import importlib
import math

import torch

from astra_sglang.specs import dtypes as dt
from astra_sglang.specs import init as kinds
from astra_sglang.specs.exprs import eval_dim
from astra_sglang.specs.records import Argument

INT_POISON = {torch.int64: -0x5A5A5A5A5A5A5A5B, torch.int32: -0x5A5A5A5B, torch.int8: -0x5B, torch.uint8: 0xA5,
              torch.bool: True}
"""Integer outputs are poisoned with these instead of NaN: values no index or count takes."""


def bound(value, dims: dict[str, int]):
    """A bound of a range kind: a number, or a dim expression evaluated at this shape."""
    return eval_dim(value, dims) if isinstance(value, str) else value


def is_float(dtype: torch.dtype) -> bool:
    return dtype.is_floating_point


def poison(t: torch.Tensor) -> None:
    if is_float(t.dtype):
        t.fill_(math.nan)
    else:
        t.fill_(INT_POISON[t.dtype])


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


def perturb(arg: Argument, t: torch.Tensor, gen: torch.Generator, dims: dict[str, int]) -> None:
    """Change one element of input `t` (or swap two, for kinds that must stay distinct) within its kind's
    values. Full and generator kinds are left as they are: no other value is known to be valid."""
    if not t.numel() or isinstance(arg.init, (kinds.Full, kinds.Generator)):
        return
    at = tuple(int(torch.randint(n, (1,), generator=gen, device=gen.device)) for n in t.shape)
    step = float(torch.randn((), generator=gen, device=gen.device).abs()) + 1.0
    init = arg.init
    if isinstance(init, (kinds.Distinct, kinds.Permutation)):
        # swap with the neighbouring element of the same row (or of the tensor): both stay valid
        if t.shape[-1] < 2 and not (isinstance(init, kinds.Distinct) and init.per == "all" and t.numel() > 1):
            return
        flat = t.reshape(-1) if t.is_contiguous() else None
        if t.shape[-1] >= 2:
            other = (*at[:-1], (at[-1] + 1) % t.shape[-1])
            a, b = t[at].clone(), t[other].clone()
            t[at], t[other] = b, a
        elif flat is not None:
            a, b = flat[0].clone(), flat[1].clone()
            flat[0], flat[1] = b, a
        return
    if isinstance(init, kinds.RandInt):
        low, high = int(bound(init.low, dims)), int(bound(init.high, dims))
        if high - low > 1:
            t[at] = low + (int(t[at]) - low + int(step)) % (high - low)
        return
    if t.dtype == torch.bool:
        t[at] = not bool(t[at])
        return
    if not is_float(t.dtype):
        t[at] = int(t[at]) + int(step)
        return
    if isinstance(init, kinds.Uniform):
        low, high = float(bound(init.low, dims)), float(bound(init.high, dims))
        new = low + (float(t[at]) - low + (high - low) * 0.37 * step) % (high - low)
        t[at].copy_(torch.tensor(new))
        return
    t[at].copy_(t[at].float() + step * (init.std or 1.0))


def dtype_of(arg: Argument, dtype: str) -> torch.dtype:
    return dt.torch_dtype(arg.dtype_for(dtype))
