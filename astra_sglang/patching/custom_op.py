"""The torch custom op `torch.ops.astra.<op>` behind a patched op under torch.compile.

Its schema declares every out / in-place argument as mutated and its fake implementation does nothing,
so dynamo never traces into ctypes and functionalization knows what the kernel writes. Eager calls and
CUDA-graph capture never come through here (see ops.py): the dispatcher costs ~10 us a call.
"""
from __future__ import annotations

from typing import Protocol

import torch

from astra_sglang.specs.records import KernelSpec


class Runs(Protocol):
    """What the custom op dispatches to (patching/patched_op.py's PatchedOp, which imports this module)."""

    def run_values(self, values: list) -> None: ...


_LIB: torch.library.Library | None = None
ACTIVE: dict[str, Runs] = {}
"""op name -> the PatchedOp the custom op dispatches to (the schema is defined once per process)."""


def schema(spec: KernelSpec) -> str:
    """e.g. `fused_add_rmsnorm(Tensor(a!) input, Tensor(b!) residual, Tensor weight, float eps) -> ()`."""
    parts, alias = [], iter("abcdefghijklmnopqrstuvwxyz")
    for arg in spec.arguments:
        if arg.kind == "scalar":
            parts.append(f"{arg.scalar_type} {arg.name}")
        elif arg.role == "in":
            parts.append(f"Tensor {arg.name}")
        else:
            parts.append(f"Tensor({next(alias)}!) {arg.name}")
    return f"{spec.name}({', '.join(parts)}) -> ()"


def register_custom_op(spec: KernelSpec) -> None:
    global _LIB
    if _LIB is None:
        _LIB = torch.library.Library("astra", "FRAGMENT")
    if hasattr(torch.ops.astra, spec.name):
        return
    _LIB.define(schema(spec))
    name = spec.name

    def impl(*values):
        ACTIVE[name].run_values(list(values))

    def fake(*values):
        return None

    _LIB.impl(name, impl, "CompositeExplicitAutograd")
    torch.library.register_fake(f"astra::{name}", fake, lib=_LIB)
