"""Fresh random arguments for a spec'd op: inputs drawn anew per trial (by each argument's init kind, see
draw.py), outputs poisoned with NaN (integers with a sentinel; prestate.py gives them other contents too)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from astra_sglang.harness import draw
from astra_sglang.harness.limits import CANARY, GUARD_BYTES
from astra_sglang.specs import dtypes as dt
from astra_sglang.specs.records import Argument, EdgeCase, KernelSpec

TORCH_DTYPES = {name: getattr(torch, name) for name in dt.ELEMENT_BYTES}


def canonical_dtype(name: str) -> str:
    """"bf16" -> "bfloat16"; ValueError for a name that is not a dtype an op runs over."""
    name = dt.canonical(name)
    if name not in dt.OP_DTYPES:
        raise ValueError(f"{name!r} is not an op dtype ({', '.join(dt.OP_DTYPES)})")
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
    dims: dict[str, int] = field(default_factory=dict)
    """Every dim's value (free dims included): the bounds of range inits are evaluated over these."""

    def clone(self) -> "OpArgs":
        return OpArgs([t.clone() for t in self.tensors], list(self.scalars), dims=self.dims)

    def upcast(self) -> "OpArgs":
        """fp64 copies of floating tensors (fp8 included) for the reference; integers stay as they are."""
        return OpArgs([t.double() if t.dtype.is_floating_point else t.clone() for t in self.tensors],
                      list(self.scalars), dims=self.dims)

    def for_reference(self, spec: KernelSpec) -> "OpArgs":
        """The copies the spec's reference computes on: fp64 (`upcast`), or, where the reference is the original
        op itself (`reference_dtype = "op"`, an onboarded op's oracle), in the op's own dtypes."""
        return self.clone() if spec.reference_dtype == "op" else self.upcast()

    def call_args(self, spec: KernelSpec) -> list:
        """Positional arguments in the op's full argument order (tensors and scalars interleaved)."""
        tensors, scalars = iter(self.tensors), iter(self.scalars)
        return [next(tensors) if a.kind == "tensor" else next(scalars) for a in spec.arguments]

    def call(self, fn, spec: KernelSpec):
        """fn called as SGLang calls it: keyword-only arguments by name, the rest positionally."""
        values = self.call_args(spec)
        args = [v for a, v in zip(spec.arguments, values) if not a.keyword]
        return fn(*args, **{a.name: v for a, v in zip(spec.arguments, values) if a.keyword})

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors)


def _arg_dtype(arg, dtype: str) -> torch.dtype:
    return TORCH_DTYPES[arg.dtype_for(dtype)]


def scalar_value(arg: Argument):
    """What the harness passes for a scalar: its default, as SGLang's type."""
    value = arg.default if arg.default is not None else 0
    return {"float": float, "int": int, "bool": bool}[arg.scalar_type](value)


def _round_up(n: int, to: int) -> int:
    return -(-n // to) * to


@dataclass(frozen=True)
class Layout:
    """Where a tensor lies inside its guarded byte buffer: `pre` canary bytes, the elements (rows `ALIGN_SHIFT`
    bytes apart beyond their width where the spec allows the argument strided), slack, all of it `nbytes`
    long (a multiple of 256, so that buffers placed back to back keep the alignment)."""

    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: torch.dtype
    pre: int
    extent: int
    nbytes: int
    strided: bool

    def tensor(self, buffer: torch.Tensor) -> torch.Tensor:
        """The tensor inside `buffer` (uint8, one buffer of this layout)."""
        flat = buffer[self.pre:self.pre + self.extent].view(self.dtype)
        return flat.as_strided(self.shape, self.strides) if self.strided else flat.view(self.shape)

    def guard(self, buffer: torch.Tensor) -> "Guarded":
        return Guarded(buffer, self.pre, self.extent, self.strided)


def layout(arg: Argument, dims: tuple[int, ...], dtype: torch.dtype) -> Layout:
    """The guarded layout of one tensor argument: at a 16-byte-aligned (not 256; the argument's `align` where
    the spec raises it) offset inside canary bytes, at least a row of them before and after."""
    size = torch.empty((), dtype=dtype).element_size()
    width = dims[-1] if dims else 1
    rows = math.prod(dims[:-1]) if len(dims) > 1 else 1
    strided = arg.strided and len(dims) > 1
    row_stride = width + (ALIGN_SHIFT // size if strided else 0)
    extent = ((rows - 1) * row_stride + width) * size if math.prod(dims) else 0
    slack = max(GUARD_BYTES, width * size)
    pre = _round_up(slack, 256) + max(ALIGN_SHIFT, arg.align)
    strides = tuple([row_stride * math.prod(dims[i + 1:-1]) for i in range(len(dims) - 1)] + [1]) if dims else ()
    if not strided:
        strides = tuple(math.prod(dims[i + 1:]) for i in range(len(dims)))
    return Layout(tuple(dims), strides, dtype, pre, extent, _round_up(pre + extent + slack, 256), strided)


def _guarded(arg: Argument, dims: tuple[int, ...], dtype: torch.dtype, device) -> tuple[torch.Tensor, Guarded]:
    where = layout(arg, dims, dtype)
    buffer = torch.full((where.nbytes,), CANARY, dtype=torch.uint8, device=device)
    return where.tensor(buffer), where.guard(buffer)


def allocate(spec: KernelSpec, shape: tuple[int, ...], dtype: str, device: torch.device | str,
             guard: bool = True) -> OpArgs:
    """Uninitialized arguments; with `guard`, each tensor inside canary bytes (see `Guarded`)."""
    dims = spec.dims_of(shape)
    scalars = [dims[a.dim] if a.dim else scalar_value(a) for a in spec.scalar_args]
    if not guard:
        return OpArgs([torch.empty(spec.arg_shape(a, shape), dtype=_arg_dtype(a, dtype), device=device)
                       for a in spec.tensor_args], scalars, dims=dims)
    made = [_guarded(a, spec.arg_shape(a, shape), _arg_dtype(a, dtype), device) for a in spec.tensor_args]
    return OpArgs([t for t, _ in made], scalars, [g for _, g in made], dims)


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
    """Draw fresh inputs in place (same buffers) by each argument's init kind, poison outputs, then apply an
    edge case. Tensors whose index is in `skip` are left as they are (shared with other argument sets)."""
    for i, (arg, t) in enumerate(zip(spec.tensor_args, args.tensors)):
        if i in skip:
            continue
        if arg.role == "out":
            draw.poison(t)
            continue
        t.copy_(draw.values(arg, tuple(t.shape), t.dtype, gen, t.device, args.dims))
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
            draw.poison(t)


def poison_all(args: OpArgs) -> None:
    """Make every buffer of a finished call NaN (integers: a sentinel), so a kernel still reading it later is
    caught."""
    for t in args.tensors:
        draw.poison(t)


def checked_args(spec: KernelSpec) -> list[tuple[int, str]]:
    """(tensor index, role) of every argument whose final value is compared: outputs and in-place."""
    return [(i, a.role) for i, a in enumerate(spec.tensor_args) if a.role in ("out", "inplace")]
