"""An op's arguments from its Python signature, and its dims and shapes from recorded calls.

A recorded call gives each tensor argument's shape and dtype (`CallRecord`). Dims are found by value: the
first axis every tensor shares is `tokens`; every other distinct size becomes a dim (named after the model
config field it equals where `--model` is given), and a size that is twice, or half, a known dim is written as
that expression ("2*d"), so that one recorded call already gives the spec the relations between arguments.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

from astra_sglang.errors import AstraError
from astra_sglang.patching.recorder import CallRecord

OUT_NAMES = ("out", "output", "result", "dst")
SCALAR_TYPES = {float: "float", int: "int", bool: "bool"}


@dataclass
class Param:
    name: str
    kind: str = "tensor"
    role: str = "in"
    scalar_type: str = "float"
    default: Any = None
    keyword: bool = False
    optional: bool = False
    shape: list = field(default_factory=list)
    dtype: str = "T"


def _annotation(p: inspect.Parameter) -> str:
    a = p.annotation
    return a if isinstance(a, str) else getattr(a, "__name__", str(a))


def params_of(fn) -> list[Param]:
    """The spec arguments the signature implies: tensors (annotated so, or without a scalar default), outputs
    (named out/output), scalars (a float/int/bool default or annotation). Parameters with another default
    (None-defaulted objects such as fused_args) are left out: a patched call binds them by name and serves any
    non-default value with the original op."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        raise AstraError(f"{getattr(fn, '__name__', fn)}: no Python signature to read (a builtin or torch op); "
                         "onboard its Python wrapper") from None
    out = []
    for p in sig.parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.name == "self":
            continue
        ann = _annotation(p).lower()
        has_default = p.default is not p.empty
        keyword = p.kind is p.KEYWORD_ONLY
        if type(p.default) in SCALAR_TYPES or ann in ("float", "int", "bool"):
            stype = SCALAR_TYPES.get(type(p.default)) or ann
            out.append(Param(p.name, "scalar", scalar_type=stype, default=p.default if has_default else None,
                             keyword=keyword, optional=has_default))
        elif not has_default or "tensor" in ann or p.name in OUT_NAMES:
            role = "out" if p.name in OUT_NAMES else "in"
            out.append(Param(p.name, role=role, keyword=keyword, optional=has_default))
    if not any(p.kind == "tensor" for p in out):
        raise AstraError(f"{getattr(fn, '__name__', fn)}: no tensor argument in its signature")
    return out


@dataclass
class DimPlan:
    dims: list[str]
    shapes: list[tuple[int, ...]]
    model_dims: dict[str, str]


def plan_dims(params: list[Param], calls: list[CallRecord], model: dict[str, int] | None) -> DimPlan:
    """Name the dims of the recorded calls and write every tensor parameter's shape over them (in place)."""
    tensors = [p for p in params if p.kind == "tensor"]
    first = calls[0]
    missing = [p.name for p in tensors if p.name not in first.tensors and not p.optional and p.role != "out"]
    if missing:
        raise AstraError(f"the recorded call gives no shape for {', '.join(missing)}")
    present = [p for p in tensors if p.name in first.tensors]
    lead = {first.tensors[p.name].shape[0] for p in present if first.tensors[p.name].shape}
    names: dict[int, str] = {}
    if len(lead) == 1 and all(first.tensors[p.name].shape for p in present):
        names[lead.pop()] = "tokens"
    fields = {v: k for k, v in (model or {}).items() if k != "name"}
    model_dims: dict[str, str] = {}

    def name_of(size: int) -> str | int:
        if size in names:
            return names[size]
        for known, dim in list(names.items()):
            if size == 2 * known:
                return f"2*{dim}"
            if known == 2 * size and dim != "tokens":
                return f"{dim} // 2"
        if size == 1:
            return 1
        dim = fields.get(size) or ("d" if "d" not in names.values() else f"d{len(names)}")
        if dim in names.values():
            dim = f"{dim}{len(names)}"
        names[size] = dim
        if size in fields:
            model_dims[dim] = fields[size]
        return dim

    # narrowest tensors first: their sizes become the dims, wider ones the expressions ("2*d" after "d")
    for p in sorted(present, key=lambda p: sum(first.tensors[p.name].shape)):
        call = first.tensors[p.name]
        p.shape = [name_of(s) for s in call.shape]
    dims = [d for d in names.values()]
    shapes = []
    for call in calls:
        values: dict[str, int] = {}
        for p in present:
            for expr, size in zip(p.shape, call.tensors[p.name].shape if p.name in call.tensors else []):
                if isinstance(expr, str) and expr in dims:
                    values[expr] = size
        if all(d in values for d in dims):
            shape = tuple(values[d] for d in dims)
            if shape not in shapes:
                shapes.append(shape)
    return DimPlan(dims, shapes, model_dims)
