"""Typed records for a kernel spec (one TOML file per op under extract/).

A spec says what the op computes (arguments, roles, dtypes, a torch reference), on which shapes it is
checked and timed (derived from real model configs), how close a result must be (per-dtype tolerances),
where its source lives in SGLang / sgl-kernel / flashinfer, and which SGLang symbols call it.
"""
from __future__ import annotations

import importlib
import math
import re
from typing import Callable, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from astra_sglang.specs import dtypes as dt
from astra_sglang.specs.exprs import compile_dim, dim_names, eval_dim
from astra_sglang.specs.init import INDEX_KINDS, Init, Normal, bounds

DType = dt.OpDType
ELEMENT_BYTES = dt.ELEMENT_BYTES
__all__ = ["Argument", "KernelSpec", "compile_dim", "dim_names", "eval_dim", "DType", "ELEMENT_BYTES"]


ZERO_OK = re.compile(r"^\s*([A-Za-z_]\w*)\s*>=\s*0\s*$")


def _holds(constraint: str, dims: dict[str, int], otherwise: bool | None = None) -> bool:
    """`constraint` evaluated over `dims`; where it cannot be (a division by a zero dim), `otherwise` if given."""
    try:
        return bool(eval(constraint, {"__builtins__": {}, "min": min, "max": max}, dict(dims)))  # noqa: S307
    except ArithmeticError:
        if otherwise is None:
            raise
        return otherwise


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Argument(_Record):
    """One argument of the op, in the order of SGLang's call and of the C ABI."""

    name: str = Field(pattern=r"^[A-Za-z_]\w*$")
    kind: Literal["tensor", "scalar"] = "tensor"
    role: Literal["in", "out", "inplace"] = "in"
    """in: read only; out: fully overwritten (poisoned before each call); inplace: read then overwritten."""
    dtype: str = "T"
    """T = the op's dtype under test; or a fixed dtype (float32, int64, float8_e4m3fn, bool, ...; aliases such as
    fp32, i64, fp8 accepted) whatever T is: an LSE, positions, indices, quantization scales."""
    shape: list[str | int] = Field(default_factory=list)
    """Shape as expressions over the spec's dims and free dims, e.g. ["tokens", "2*d"]."""
    init: Init = Normal()
    """How fresh values are drawn (inputs and in-place arguments): specs/init.py's kinds."""
    default: float | int | bool | None = None
    """Default value of a scalar argument (e.g. eps), also what the harness passes."""
    scalar_type: dt.ScalarType = "float"
    """A scalar's Python type in SGLang's call (is_neox: bool, group_size: int); the C ABI gets a double."""
    dim: str = ""
    """A scalar whose value is a dim (group_size = the free dim `group`): the harness passes the dim's value, and
    a patched call with another value is solved with it, so tensors shaped by the dim must agree."""
    keyword: bool = False
    """Keyword-only in SGLang's signature (after `*`): baselines and fallbacks pass it by name."""
    optional: bool = False
    """SGLang's signature gives it a default (None for a tensor): callers may leave it out. The harness always
    passes it; a patched call that leaves an optional tensor out is served by the original op."""
    strided: bool = False
    """SGLang may hand this tensor in as a view whose rows lie further apart than its width (e.g. a slice of
    a wider buffer): the harness then checks it that way, with the gaps between rows guarded."""
    allocate: str = Field(default="", pattern=r"^([A-Za-z_][\w.]*:[A-Za-z_]\w*)?$")
    """An output's allocator, "module:function", where SGLang lays it out by the call's scalars (its block-FP8
    quant puts the scales column-major for DeepGEMM when asked): a patched call that passes no such output gets
    fn(*the non-output arguments in spec order). Empty: contiguous, shaped by the spec."""
    align: Literal[16, 32, 64, 128] = 16
    """Bytes the tensor's start is aligned to in every call SGLang makes; the harness puts it that far past a
    256-byte boundary (16: what a 16-byte vector kernel may assume). Raise it only where SGLang's own op
    refuses less, so its callers must give more: its JIT FP8 group quant wants x 32-byte aligned."""

    @field_validator("dtype")
    @classmethod
    def _dtype(cls, value: str) -> str:
        return value if value == "T" else dt.canonical(value)

    @field_validator("shape")
    @classmethod
    def _shape(cls, value: list) -> list:
        for expr in value:
            compile_dim(expr)  # ValueError names the expression
        return value

    @model_validator(mode="after")
    def _kinds(self) -> "Argument":
        if self.kind == "scalar" and (self.shape or self.role != "in"):
            raise ValueError(f"{self.name}: a scalar has no shape and role 'in'")
        if self.role == "out" and self.init.kind != "normal":
            raise ValueError(f"{self.name}: an output has no init (it is poisoned before every call)")
        if self.allocate and self.role != "out":
            raise ValueError(f"{self.name}: only an output has an allocator")
        return self

    def dtype_for(self, dtype: str) -> str:
        """This argument's dtype name when the op runs over `dtype`."""
        return dtype if self.dtype == "T" else self.dtype

    @property
    def is_index(self) -> bool:
        return self.init.kind in INDEX_KINDS


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


MODEL_FIELDS = ("hidden", "intermediate", "heads", "kv_heads", "head_dim")
"""The model config fields (extract/models.toml) a neighbour's width may be written in."""


class Neighbour(_Record):
    """A GEMM beside the op in the model: the one before writes one of the op's arguments (its output is the
    op's input), the one after reads one (the op's output is its input). The argument is the GEMM's [m, n]
    output (before) or [m, k] input (after), m its first dim (tokens)."""

    name: str
    """The layer in the model, e.g. "down_proj"."""
    arg: str
    """The op's argument it writes (before) or reads (after)."""
    width: str
    """The GEMM's other dimension: k (its input width) for the one before, n (its output width) for the one
    after; an expression over model config fields (MODEL_FIELDS), e.g. "(heads + 2 * kv_heads) * head_dim"."""

    @field_validator("width")
    @classmethod
    def _width(cls, value: str) -> str:
        unknown = [n for n in dim_names(value) if n not in MODEL_FIELDS]
        if unknown:
            raise ValueError(f"unknown model field {unknown[0]!r} in {value!r} (fields: {', '.join(MODEL_FIELDS)})")
        return value


class Sandwich(_Record):
    """Where the op runs in the model, for timing it between its neighbours (harness/sandwich.py)."""

    before: Neighbour
    after: Neighbour
    models: list[str] = Field(default_factory=lambda: ["llama-3-8b"])
    """The models whose shapes a server serves (the `served` shape set: these models x `shapes.tokens`); a
    shape's GEMMs come from the first model of extract/models.toml whose dims match it."""
    note: str = ""
    """Why these neighbours, where the op's place in the model is not obvious."""


class SourceLocation(_Record):
    """Where the op's original CUDA lives in one source (used by `extract`)."""

    model_config = ConfigDict(extra="allow", frozen=True)
    path: str
    """File inside the source (package or checkout), e.g. data/include/flashinfer/norm.cuh."""
    kernel: str
    """Name of the __global__ function."""
    host_entry: str = ""
    """A torch-free host function to call from the launcher, if the source has one."""
    also: list[str] = Field(default_factory=list)
    """Other __global__ functions of the op in the same file, which its launcher runs at other shapes (sgl-kernel's
    topk_softmax: moeSoftmax + moeTopK where the expert count is not a power of two): `profile` attributes them."""


class SGLangTarget(_Record):
    """A name SGLang calls for this op (a module global in a calling module)."""

    module: str
    attr: str
    note: str = ""


class Onboarded(_Record):
    """What `onboard` wrote a user spec from, and what it leaves for the first GPU run (`[onboard]`)."""

    entry: str = Field(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
    """The op onboarded, "module:function"."""
    call: str = Field(default="", pattern=r"^([A-Za-z_][\w.]*:[A-Za-z_]\w*)?$")
    """The adapter calling the op with the spec's arguments ("module:function"): SGLang's op as the harness's
    baseline and first kernel, and the oracle where the reference is the op itself."""
    proposed: str = Field(default="", pattern=r"^([A-Za-z_][\w.]*:[A-Za-z_]\w*)?$")
    """A torch reference (fp64) waiting for the GPU check: it becomes `reference` once it agrees with the op on
    the GPU at the recorded shapes; until then the op itself is the reference."""
    proposed_note: str = ""
    """Where the proposed reference comes from (the tool's, SGLang's forward_native, the user's)."""
    gpu_check: str = ""
    """"" until the first GPU run has checked the op (its tolerance, the proposed reference); then what it found,
    with the GPU and the date."""
    measured: dict[str, str] = Field(default_factory=dict)
    """Per dtype: the op's own run-to-run and upcast differences the tolerance was derived from."""


class KernelSpec(_Record):
    name: str = Field(pattern=r"^[A-Za-z_]\w*$")
    summary: str
    dims: list[str]
    """Named dimensions, e.g. ["tokens", "d"]; shapes are tuples in this order."""
    free_dims: dict[str, str | int] = Field(default_factory=dict)
    """Dims no shape tuple carries, each a number or an expression over `dims` and the free dims before it
    (max_pos = 4096, rope_dim = "head_dim", groups = "hidden // 128"). The harness uses the value given here;
    a patched call takes it from the tensors it is handed where they fix it (cos_sin_cache's rows)."""
    arguments: list[Argument]
    dtypes: list[str]
    """The dtypes T runs over (float32, float16, bfloat16, fp8, ints; aliases accepted)."""
    tolerance: dict[str, Tolerance] = Field(default_factory=dict)
    """Per floating dtype of a compared argument; integers are compared exactly and fp8 has a default
    (harness/limits.py FP8_TOLERANCE)."""
    reference: str = Field(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
    """Dotted path "module:function" of the torch reference (computes in fp64, mutates in place); called
    with every argument positionally in spec order."""
    reference_dtype: Literal["float64", "op"] = "float64"
    """float64: the reference gets fp64 copies of the floating arguments (a torch reference). op: it gets the
    arguments in the op's own dtypes: the reference is the original op itself on the GPU (an oracle), and the
    tolerance carries the op's own run-to-run and upcast differences (`onboard`, docs/specs.md)."""
    onboard: Onboarded | None = None
    """Set in specs `onboard` wrote (user specs)."""
    shapes: ShapeSets
    edge_cases: list[EdgeCase] = Field(default_factory=list)
    constraints: list[str] = Field(default_factory=list)
    """Python expressions over dims and free dims that every supported shape satisfies (e.g. "d % 8 == 0")."""
    sources: dict[str, SourceLocation] = Field(default_factory=dict)
    sglang_targets: list[SGLangTarget] = Field(default_factory=list)
    sandwich: Sandwich | None = None
    """The GEMMs before and after the op in the model (None: not timed in place)."""
    cost: str = ""
    """Optional "module:function" cost model, fn(dims, dtype) -> (fewest bytes, FLOPs), for ops whose fewest bytes
    are not their tensors' sizes (a fused MoE call reads only the experts its tokens route to) or whose time is
    bound by compute at some shapes; empty: `min_bytes` and no FLOPs (harness/cost.py)."""

    @field_validator("dtypes")
    @classmethod
    def _dtypes(cls, value: list[str]) -> list[str]:
        names = [dt.canonical(v) for v in value]
        bad = [n for n in names if n not in dt.OP_DTYPES]
        if bad:
            raise ValueError(f"{bad} cannot be an op's dtype T (use a fixed argument dtype)")
        return names

    @field_validator("tolerance", mode="before")
    @classmethod
    def _tolerance_keys(cls, value):
        return {dt.canonical(k): v for k, v in value.items()} if isinstance(value, dict) else value

    @model_validator(mode="after")
    def _check(self) -> "KernelSpec":
        names = [a.name for a in self.arguments]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate argument names {sorted({n for n in names if names.count(n) > 1})}")
        known = set(self.dims)
        for dim, expr in self.free_dims.items():
            if dim in self.dims:
                raise ValueError(f"free_dims.{dim}: already a dim of the shape tuple")
            self._names_known(f"free_dims.{dim}", expr, known)
            known.add(dim)
        for i, arg in enumerate(self.arguments):
            for j, expr in enumerate(arg.shape):
                self._names_known(f"arguments.{i}.shape.{j}", expr, known)
            for field, bound in bounds(arg.init).items():
                if isinstance(bound, str):
                    self._names_known(f"arguments.{i}.init.{field}", bound, known)
        if self.sandwich:
            self._sandwich_args()
        stray = [d for d in self.shapes.model_dims if d not in self.dims]
        if stray:
            raise ValueError(f"shapes.model_dims: {stray[0]!r} is not one of the dims {self.dims}")
        needed = {arg.dtype_for(d) for arg in self.tensor_args if arg.role != "in" for d in self.dtypes}
        missing = sorted(d for d in needed if d in dt.FLOATS and d not in self.tolerance)
        if missing:
            raise ValueError(f"tolerance: none for {missing} (an output or in-place argument has that dtype)")
        for i, arg in enumerate(self.arguments):
            if arg.dim and (arg.kind != "scalar" or arg.dim not in known):
                raise ValueError(f"arguments.{i}.dim: {arg.dim!r} is not a dim (or the argument not a scalar)")
            if arg.kind == "tensor" and arg.is_index and any(arg.dtype_for(d) not in dt.INTEGERS
                                                             for d in self.dtypes):
                raise ValueError(f"arguments.{i}.init: {arg.init.kind} draws indices; give {arg.name} an "
                                 "integer dtype")
        return self

    def _sandwich_args(self) -> None:
        roles = {a.name: a.role for a in self.tensor_args}
        for side, wanted in (("before", ("in", "inplace")), ("after", ("out", "inplace"))):
            arg = getattr(self.sandwich, side).arg
            if roles.get(arg) not in wanted:
                raise ValueError(f"sandwich.{side}.arg: {arg!r} is not a tensor argument the GEMM "
                                 f"{'writes (in or inplace)' if side == 'before' else 'reads (out or inplace)'}")

    @staticmethod
    def _names_known(where: str, expr, known: set[str]) -> None:
        try:
            unknown = [n for n in dim_names(expr) if n not in known]
            compile_dim(expr)
        except (ValueError, SyntaxError) as exc:
            raise ValueError(f"{where}: {exc}") from None
        if unknown:
            raise ValueError(f"{where}: unknown dim {unknown[0]!r} in {expr!r} (dims and free_dims: "
                             f"{', '.join(sorted(known))})")

    @property
    def tensor_args(self) -> list[Argument]:
        return [a for a in self.arguments if a.kind == "tensor"]

    @property
    def scalar_args(self) -> list[Argument]:
        return [a for a in self.arguments if a.kind == "scalar"]

    @property
    def all_dim_names(self) -> list[str]:
        return [*self.dims, *self.free_dims]

    def dims_of(self, shape: tuple[int, ...] | list[int]) -> dict[str, int]:
        """Every dim's value at `shape`: the tuple's dims, then the free dims from their expressions."""
        if len(shape) != len(self.dims):
            raise ValueError(f"{self.name}: shape {tuple(shape)} does not match dims {self.dims}")
        dims = dict(zip(self.dims, (int(x) for x in shape)))
        return self.with_free_dims(dims)

    def with_free_dims(self, dims: dict[str, int]) -> dict[str, int]:
        """`dims` plus every free dim it does not hold yet (evaluated in order)."""
        out = dict(dims)
        for name, expr in self.free_dims.items():
            if name not in out:
                out[name] = eval_dim(expr, out)
        return out

    def arg_shape(self, arg: Argument, shape: tuple[int, ...]) -> tuple[int, ...]:
        dims = self.dims_of(shape)
        return tuple(eval_dim(e, dims) for e in arg.shape)

    def supports(self, shape: tuple[int, ...]) -> bool:
        return self.supports_dims(self.dims_of(shape))

    def supports_dims(self, dims: dict[str, int]) -> bool:
        return all(_holds(c, dims) for c in self.constraints)

    @property
    def zero_dims(self) -> frozenset[str]:
        """Dims that may be 0: those a constraint writes as exactly `NAME >= 0` (an extend's cached prefix)."""
        return frozenset(m.group(1) for c in self.constraints if (m := ZERO_OK.match(c)))

    def unmet(self, shape: tuple[int, ...]) -> str | None:
        """Why `shape` is no shape of this op (a size below 1, or below 0 where the spec allows 0; a constraint
        that does not hold), or None: what a shape given by hand is checked against before anything is built."""
        for name, value in zip(self.dims, shape):
            least = 0 if name in self.zero_dims else 1
            if value < least:
                return f"{name} is {value}; it is at least {least}"
        try:
            dims = self.dims_of(shape)
        except (ArithmeticError, ValueError) as exc:
            return f"its free dims cannot be computed ({exc})"
        failing = [c for c in self.constraints if not _holds(c, dims, otherwise=False)]
        if failing:
            return f"{failing[0]} does not hold (the spec's constraints: {', '.join(self.constraints)})"
        return None

    def min_bytes(self, shape: tuple[int, ...], dtype: str) -> int:
        """Fewest bytes the op must move: inputs read once, outputs written once, in-place both."""
        total = 0
        for arg in self.tensor_args:
            size = ELEMENT_BYTES[arg.dtype_for(dtype)]
            total += math.prod(self.arg_shape(arg, shape)) * size * (2 if arg.role == "inplace" else 1)
        return total

    def call_bytes(self, shape: tuple[int, ...], dtype: str) -> int:
        """Bytes of the tensors one call is handed (each once): what the patch layer sizes a call by."""
        return sum(math.prod(self.arg_shape(a, shape)) * ELEMENT_BYTES[a.dtype_for(dtype)] for a in self.tensor_args)

    def reference_fn(self) -> Callable:
        module, _, func = self.reference.partition(":")
        return getattr(importlib.import_module(module), func)
