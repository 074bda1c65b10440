"""How the harness draws an input argument's values: a distribution, a range, indices, or a generator.

`kind` selects the record; a table without `kind` is a normal distribution (the specs' original form,
`init = { mean = 1.0, std = 0.2 }`). Bounds may be dim expressions, so a range follows the shape:
`{ kind = "randint", high = "max_pos" }` draws positions below the cache length at every shape.
"""
from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag

Bound = Union[int, float, str]
"""A number or a dim expression ("max_pos", "E - 1")."""


class _Init(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Normal(_Init):
    """Normal(mean, std): activations, weights (ints: rounded toward zero)."""

    kind: Literal["normal"] = "normal"
    mean: float = 0.0
    std: float = Field(default=1.0, ge=0.0)


class Uniform(_Init):
    """Uniform in [low, high): e.g. quantization scales, which must be > 0 (low = 0.5)."""

    kind: Literal["uniform"]
    low: Bound = 0.0
    high: Bound = 1.0


class RandInt(_Init):
    """Integers uniform in [low, high): positions below max_pos, token ids, slot indices that may repeat."""

    kind: Literal["randint"]
    low: Bound = 0
    high: Bound


class Distinct(_Init):
    """Distinct integers in [0, high): per row (expert ids of one token) or over the whole tensor (KV-cache
    slots one call writes). `high` must be at least the row length (the tensor's size for "all")."""

    kind: Literal["distinct"]
    high: Bound
    per: Literal["row", "all"] = "row"


class Permutation(_Init):
    """Each row (last dim) a permutation of 0 .. n-1, n its length (a sort order, a gather index)."""

    kind: Literal["permutation"]


class Full(_Init):
    """Every element one value (a zeroed counter, a flag)."""

    kind: Literal["full"]
    value: float = 0.0


class Generator(_Init):
    """Values from a Python function "module:function", called as fn(shape, dtype, generator, dims) and
    returning a tensor of that shape (cast to the argument's dtype). For anything the kinds above miss."""

    kind: Literal["generator"]
    function: str = Field(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


def _kind(value) -> str:
    if isinstance(value, dict):
        return value.get("kind", "normal")
    return getattr(value, "kind", "normal")


Init = Annotated[Union[Annotated[Normal, Tag("normal")], Annotated[Uniform, Tag("uniform")],
                       Annotated[RandInt, Tag("randint")], Annotated[Distinct, Tag("distinct")],
                       Annotated[Permutation, Tag("permutation")], Annotated[Full, Tag("full")],
                       Annotated[Generator, Tag("generator")]], Discriminator(_kind)]
INDEX_KINDS = ("randint", "distinct", "permutation")
"""Kinds whose values are indices: perturbing one element keeps it a valid index."""


def bounds(init) -> dict[str, Bound]:
    """The bounds of a range kind, by field name (for validation at every shape)."""
    return {k: getattr(init, k) for k in ("low", "high") if hasattr(init, k)}
