"""The least work a call must do: fewest bytes moved and FLOPs, from the spec's cost model or its tensors.

The physics bound (gpu_eval.physics) sets a time against both: bytes over the copy roofline and FLOPs over the
matmul rate measured in the same run, whichever binds. Most ops here move every element of their tensors once
and compute little (`KernelSpec.min_bytes`, no FLOPs); a spec whose op reads only part of its arguments or is
compute-bound at some shapes (fused MoE) names a cost model, `cost = "module:function"`, returning
`(bytes, flops)` for a shape's dims and a dtype.
"""
from __future__ import annotations

import functools
import importlib
from typing import Callable, NamedTuple

from astra_sglang.errors import AstraError
from astra_sglang.specs.records import KernelSpec


class Cost(NamedTuple):
    bytes: int
    """Fewest bytes a call must move between DRAM and the chip."""
    flops: int
    """Fewest floating-point operations it must do (multiply-add = 2); 0 where the op is not compute-bound."""


@functools.cache
def _model(path: str) -> Callable:
    module, _, name = path.partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise AstraError(f"cost model {path!r} not found: {exc}") from None


def shape_cost(spec: KernelSpec, shape: tuple[int, ...], dtype: str) -> Cost:
    """The spec's cost model at `shape`, or its tensors' fewest bytes and no FLOPs where it names none."""
    if not spec.cost:
        return Cost(spec.min_bytes(shape, dtype), 0)
    nbytes, flops = _model(spec.cost)(spec.dims_of(shape), dtype)
    return Cost(int(nbytes), int(flops))
