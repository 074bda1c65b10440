"""Fresh random arguments for a spec'd op: inputs drawn anew per trial, outputs poisoned with NaN."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from astra_sglang.specs.records import EdgeCase, KernelSpec

TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
DTYPE_ALIASES = {"fp32": "float32", "f32": "float32", "fp16": "float16", "half": "float16", "f16": "float16",
                 "bf16": "bfloat16"}


def canonical_dtype(name: str) -> str:
    name = DTYPE_ALIASES.get(name.strip().lower(), name.strip().lower())
    if name not in TORCH_DTYPES:
        raise ValueError(f"unknown dtype {name!r}")
    return name


@dataclass
class OpArgs:
    """One call's arguments in spec order: tensors (tensor args) and scalars (scalar args)."""

    tensors: list[torch.Tensor]
    scalars: list[float]

    def clone(self) -> "OpArgs":
        return OpArgs([t.clone() for t in self.tensors], list(self.scalars))

    def upcast(self) -> "OpArgs":
        """fp64 copies, for the reference."""
        return OpArgs([t.double() for t in self.tensors], list(self.scalars))

    def call_args(self, spec: KernelSpec) -> list:
        """Positional arguments in the op's full argument order (tensors and scalars interleaved)."""
        tensors, scalars = iter(self.tensors), iter(self.scalars)
        return [next(tensors) if a.kind == "tensor" else next(scalars) for a in spec.arguments]

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors)


def _arg_dtype(arg, dtype: str) -> torch.dtype:
    return TORCH_DTYPES[dtype if arg.dtype == "T" else arg.dtype]


def allocate(spec: KernelSpec, shape: tuple[int, ...], dtype: str, device: torch.device | str) -> OpArgs:
    tensors = [torch.empty(spec.arg_shape(a, shape), dtype=_arg_dtype(a, dtype), device=device)
               for a in spec.tensor_args]
    return OpArgs(tensors, [float(a.default if a.default is not None else 0.0) for a in spec.scalar_args])


def _fill_value(text: str, tensor: torch.Tensor) -> torch.Tensor | float:
    if text.startswith("scale:"):
        return tensor * float(text.split(":", 1)[1])
    return {"-inf": -math.inf, "+inf": math.inf, "inf": math.inf, "nan": math.nan}.get(text, None) or float(text)


def _rows(tensor: torch.Tensor, rows: str) -> torch.Tensor:
    if rows == "all" or tensor.dim() == 0:
        return tensor
    n = tensor.shape[0]
    return tensor[: max(1, n // 2)] if rows == "half" else tensor[:1]


def fill(spec: KernelSpec, args: OpArgs, gen: torch.Generator, edge: EdgeCase | None = None) -> OpArgs:
    """Draw fresh inputs in place (same buffers), poison outputs with NaN, then apply an edge case."""
    for arg, t in zip(spec.tensor_args, args.tensors):
        if arg.role == "out":
            t.fill_(math.nan)
            continue
        noise = torch.randn(t.shape, generator=gen, device=t.device, dtype=torch.float32)
        t.copy_(noise * arg.init.std + arg.init.mean)
    if edge is not None:
        by_name = {a.name: t for a, t in zip(spec.tensor_args, args.tensors)}
        for name, text in edge.fill.items():
            target = _rows(by_name[name], edge.rows)
            value = _fill_value(text, target)
            target.copy_(value) if isinstance(value, torch.Tensor) else target.fill_(value)
    return args


def poison_outputs(spec: KernelSpec, args: OpArgs) -> None:
    for arg, t in zip(spec.tensor_args, args.tensors):
        if arg.role == "out":
            t.fill_(math.nan)


def poison_all(args: OpArgs) -> None:
    """Make every buffer of a finished call NaN, so a kernel still reading it later is caught."""
    for t in args.tensors:
        t.fill_(math.nan)


def checked_args(spec: KernelSpec) -> list[tuple[int, str]]:
    """(tensor index, role) of every argument whose final value is compared: outputs and in-place."""
    return [(i, a.role) for i, a in enumerate(spec.tensor_args) if a.role in ("out", "inplace")]
