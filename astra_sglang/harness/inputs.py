"""Fresh random arguments for a spec'd op: inputs drawn anew per trial, outputs poisoned with NaN."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from astra_sglang.harness.limits import CANARY, GUARD_BYTES
from astra_sglang.specs.records import Argument, EdgeCase, KernelSpec

TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
DTYPE_ALIASES = {"fp32": "float32", "f32": "float32", "fp16": "float16", "half": "float16", "f16": "float16",
                 "bf16": "bfloat16"}


def canonical_dtype(name: str) -> str:
    name = DTYPE_ALIASES.get(name.strip().lower(), name.strip().lower())
    if name not in TORCH_DTYPES:
        raise ValueError(f"unknown dtype {name!r}")
    return name


ALIGN_SHIFT = 16
"""Guarded tensors start 16 bytes past a 256-byte boundary: the alignment a kernel may assume (16-byte
vectors), not the 256/512 bytes a fresh allocation happens to have."""


@dataclass
class Guarded:
    """A tensor inside a canary-filled byte buffer: `pre` bytes before it, slack after it, and gaps between
    rows when the argument is handed in strided."""

    buffer: torch.Tensor
    """uint8, the whole allocation."""
    pre: int
    """Bytes before the tensor's first element."""
    extent: int
    """Bytes from the first element to one past the last (rows and the gaps between them)."""
    strided: bool = False


@dataclass
class OpArgs:
    """One call's arguments in spec order: tensors (tensor args) and scalars (scalar args)."""

    tensors: list[torch.Tensor]
    scalars: list[float]
    guards: list[Guarded | None] = field(default_factory=list)
    """Per tensor, its guarded allocation (empty list: allocated without guards)."""

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


def _round_up(n: int, to: int) -> int:
    return -(-n // to) * to


def _guarded(arg: Argument, dims: tuple[int, ...], dtype: torch.dtype, device) -> tuple[torch.Tensor, Guarded]:
    """The tensor at a 16-byte-aligned (not 256) offset inside canary bytes; rows `ALIGN_SHIFT` bytes apart
    beyond their width when the spec allows the argument strided."""
    size = torch.empty((), dtype=dtype).element_size()
    width = dims[-1] if dims else 1
    rows = math.prod(dims[:-1]) if len(dims) > 1 else 1
    strided = arg.strided and len(dims) > 1
    row_stride = width + (ALIGN_SHIFT // size if strided else 0)
    extent = ((rows - 1) * row_stride + width) * size if math.prod(dims) else 0
    slack = max(GUARD_BYTES, width * size)
    pre = _round_up(slack, 256) + ALIGN_SHIFT
    buffer = torch.full((pre + extent + slack,), CANARY, dtype=torch.uint8, device=device)
    flat = buffer[pre:pre + extent].view(dtype)
    if strided:
        strides = [row_stride * math.prod(dims[i + 1:-1]) for i in range(len(dims) - 1)] + [1]
        tensor = flat.as_strided(dims, strides)
    else:
        tensor = flat.view(dims)
    return tensor, Guarded(buffer, pre, extent, strided)


def allocate(spec: KernelSpec, shape: tuple[int, ...], dtype: str, device: torch.device | str,
             guard: bool = True) -> OpArgs:
    """Uninitialized arguments; with `guard`, each tensor inside canary bytes (see `Guarded`)."""
    scalars = [float(a.default if a.default is not None else 0.0) for a in spec.scalar_args]
    if not guard:
        return OpArgs([torch.empty(spec.arg_shape(a, shape), dtype=_arg_dtype(a, dtype), device=device)
                       for a in spec.tensor_args], scalars)
    made = [_guarded(a, spec.arg_shape(a, shape), _arg_dtype(a, dtype), device) for a in spec.tensor_args]
    return OpArgs([t for t, _ in made], scalars, [g for _, g in made])


def _fill_value(text: str, tensor: torch.Tensor) -> torch.Tensor | float:
    if text.startswith("scale:"):
        return tensor * float(text.split(":", 1)[1])
    return {"-inf": -math.inf, "+inf": math.inf, "inf": math.inf, "nan": math.nan}.get(text, None) or float(text)


def _rows(tensor: torch.Tensor, rows: str) -> torch.Tensor:
    if rows == "all" or tensor.dim() == 0:
        return tensor
    n = tensor.shape[0]
    return tensor[: max(1, n // 2)] if rows == "half" else tensor[:1]


def fill(spec: KernelSpec, args: OpArgs, gen: torch.Generator, edge: EdgeCase | None = None,
         skip: frozenset[int] = frozenset()) -> OpArgs:
    """Draw fresh inputs in place (same buffers), poison outputs with NaN, then apply an edge case.
    Tensors whose index is in `skip` are left as they are (shared with other argument sets)."""
    for i, (arg, t) in enumerate(zip(spec.tensor_args, args.tensors)):
        if i in skip:
            continue
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
