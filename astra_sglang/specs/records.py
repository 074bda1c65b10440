"""Typed records for a kernel spec (one TOML file per op under extract/).

A spec says what the op computes (arguments, roles, dtypes, a torch reference), on which shapes it is
checked and timed (derived from real model configs), how close a result must be (per-dtype tolerances),
where its source lives in SGLang / sgl-kernel / flashinfer, and which SGLang symbols call it.
"""
from __future__ import annotations

import ast
import importlib
import math
import operator
from typing import Callable, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

DType = Literal["float32", "float16", "bfloat16"]
ELEMENT_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv}


def compile_dim(expr: str | int) -> Callable[[dict], int]:
    """A shape expression ("2*d", "tokens") as nested closures over named dims (integers, + - * // only):
    parsed once, then evaluated per call without ast (the live patch's hot path), and traceable by dynamo."""
    if isinstance(expr, int):
        return lambda dims: expr

    def build(node: ast.AST) -> Callable[[dict], int]:
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            value = node.value
            return lambda dims: value
        if isinstance(node, ast.Name):
            name = node.id
            return lambda dims: dims[name]
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            fn, left, right = _OPS[type(node.op)], build(node.left), build(node.right)
            return lambda dims: fn(left(dims), right(dims))
        raise ValueError(f"unsupported shape expression {expr!r}")

    return build(ast.parse(expr, mode="eval").body)


def dim_names(expr: str | int) -> list[str]:
    """The dims a shape expression uses."""
    if isinstance(expr, int):
        return []
    return sorted({n.id for n in ast.walk(ast.parse(expr, mode="eval")) if isinstance(n, ast.Name)})


def eval_dim(expr: str | int, dims: dict[str, int]) -> int:
    """Evaluate a shape expression such as "2*d" or "tokens" over named dims."""
    return compile_dim(expr)(dims)


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Init(_Record):
    """How the harness draws fresh random values for an input argument."""

    mean: float = 0.0
    """Mean of the normal distribution."""
    std: float = 1.0
    """Standard deviation of the normal distribution."""


class Argument(_Record):
    """One argument of the op, in the order of SGLang's call and of the C ABI."""

    name: str
    kind: Literal["tensor", "scalar"] = "tensor"
    role: Literal["in", "out", "inplace"] = "in"
    """in: read only; out: fully overwritten (poisoned before each call); inplace: read then overwritten."""
    dtype: Literal["T", "float32"] = "T"
    """T = the op's dtype under test; float32 = always fp32 (e.g. log-sum-exp)."""
    shape: list[str | int] = Field(default_factory=list)
    """Shape as expressions over the spec's dims, e.g. ["tokens", "2*d"]."""
    init: Init = Init()
    """Distribution of fresh random values (inputs and in-place arguments)."""
    default: float | None = None
    """Default value of a scalar argument (e.g. eps)."""
    strided: bool = False
    """SGLang may hand this tensor in as a view whose rows lie further apart than its width (e.g. a slice of
    a wider buffer): the harness then checks it that way, with the gaps between rows guarded."""


class Tolerance(_Record):
    """Element passes when |out - ref| <= atol + rtol * |ref| (ref in fp64)."""

    atol: float
    rtol: float


class EdgeCase(_Record):
    """A named special input: some rows of some arguments filled with a fixed value."""

    name: str
    dims: dict[str, int] = Field(default_factory=dict)
    """Shape of the case (all spec dims), or empty to apply it on every tested shape."""
    fill: dict[str, str] = Field(default_factory=dict)
    """argument name -> value ("-inf", "+inf", "nan", "0", "scale:1000") applied to `rows` of it."""
    rows: Literal["all", "half", "first"] = "all"


class ShapeSets(_Record):
    """Where the shapes come from: model configs crossed with token counts, plus fixed sets."""

    model_dims: dict[str, str] = Field(default_factory=dict)
    """spec dim -> model config field (e.g. d -> "intermediate"); tokens come from `tokens`."""
    tokens: list[int] = Field(default_factory=list)
    """Token counts crossed with every model (decode and prefill)."""
    paper: list[list[int]] = Field(default_factory=list)
    """The Astra paper's shapes, in the spec's dim order."""
    quick: list[list[int]] = Field(default_factory=list)
    """A small default set for `bench` (decode, small prefill, large prefill)."""
    edge: list[list[int]] = Field(default_factory=list)
    """Odd sizes: 1 token, widths not a multiple of the vector width (where the op allows them)."""
    held_out: list[list[int]] = Field(default_factory=list)
    """Shapes the optimizing agents never see; the winner must pass them."""


class SourceLocation(_Record):
    """Where the op's original CUDA lives in one source (used by `extract`)."""

    model_config = ConfigDict(extra="allow", frozen=True)
    path: str
    """File inside the source (package or checkout), e.g. data/include/flashinfer/norm.cuh."""
    kernel: str
    """Name of the __global__ function."""
    host_entry: str = ""
    """A torch-free host function to call from the launcher, if the source has one."""


class SGLangTarget(_Record):
    """A name SGLang calls for this op (a module global in a calling module)."""

    module: str
    attr: str
    note: str = ""


class KernelSpec(_Record):
    name: str
    summary: str
    dims: list[str]
    """Named dimensions, e.g. ["tokens", "d"]; shapes are tuples in this order."""
    arguments: list[Argument]
    dtypes: list[DType]
    tolerance: dict[DType, Tolerance]
    reference: str
    """Dotted path "module:function" of the torch reference (computes in fp64, mutates in place)."""
    shapes: ShapeSets
    edge_cases: list[EdgeCase] = Field(default_factory=list)
    constraints: list[str] = Field(default_factory=list)
    """Python expressions over dims that every supported shape satisfies (e.g. "d % 8 == 0")."""
    sources: dict[str, SourceLocation] = Field(default_factory=dict)
    sglang_targets: list[SGLangTarget] = Field(default_factory=list)
    cost: str = ""
    """Optional "module:function" cost model, fn(dims, dtype) -> (fewest bytes, FLOPs), for ops whose fewest bytes
    are not their tensors' sizes (a fused MoE call reads only the experts its tokens route to) or whose time is
    bound by compute at some shapes; empty: `min_bytes` and no FLOPs (harness/cost.py)."""

    @model_validator(mode="after")
    def _check(self) -> "KernelSpec":
        missing = [d for d in self.dtypes if d not in self.tolerance]
        if missing:
            raise ValueError(f"{self.name}: no tolerance for {missing}")
        names = [a.name for a in self.arguments]
        if len(set(names)) != len(names):
            raise ValueError(f"{self.name}: duplicate argument names")
        return self

    @property
    def tensor_args(self) -> list[Argument]:
        return [a for a in self.arguments if a.kind == "tensor"]

    @property
    def scalar_args(self) -> list[Argument]:
        return [a for a in self.arguments if a.kind == "scalar"]

    def dims_of(self, shape: tuple[int, ...] | list[int]) -> dict[str, int]:
        if len(shape) != len(self.dims):
            raise ValueError(f"{self.name}: shape {tuple(shape)} does not match dims {self.dims}")
        return dict(zip(self.dims, (int(x) for x in shape)))

    def arg_shape(self, arg: Argument, shape: tuple[int, ...]) -> tuple[int, ...]:
        dims = self.dims_of(shape)
        return tuple(eval_dim(e, dims) for e in arg.shape)

    def supports(self, shape: tuple[int, ...]) -> bool:
        dims = self.dims_of(shape)
        return all(eval(c, {"__builtins__": {}}, dict(dims)) for c in self.constraints)  # noqa: S307 (spec file)

    def min_bytes(self, shape: tuple[int, ...], dtype: DType) -> int:
        """Fewest bytes the op must move: inputs read once, outputs written once, in-place both."""
        total = 0
        for arg in self.tensor_args:
            size = ELEMENT_BYTES[dtype if arg.dtype == "T" else arg.dtype]
            total += math.prod(self.arg_shape(arg, shape)) * size * (2 if arg.role == "inplace" else 1)
        return total

    def call_bytes(self, shape: tuple[int, ...], dtype: DType) -> int:
        """Bytes of the tensors one call is handed (each once): what the patch layer sizes a call by."""
        return sum(math.prod(self.arg_shape(a, shape)) * ELEMENT_BYTES[dtype if a.dtype == "T" else a.dtype]
                   for a in self.tensor_args)

    def reference_fn(self) -> Callable:
        module, _, func = self.reference.partition(":")
        return getattr(importlib.import_module(module), func)
