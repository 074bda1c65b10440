"""Load kernel specs (extract/<op>.toml) and model configs (extract/models.toml); resolve shape sets."""
from __future__ import annotations

import functools
import tomllib
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from astra_sglang.errors import AstraError
from astra_sglang.paths import specs_dir
from astra_sglang.specs.records import KernelSpec

SHAPE_SETS = ("quick", "paper", "models", "edge", "held_out", "all", "gate")
GATE = ("quick", "paper", "models", "edge", "held_out")
"""The acceptance gate a winner must pass before it is written as a patch: every named set, so the largest
token count of each, 1 token, the widths that are not a multiple of a vector width (edge) and every real
model's shapes; the patch then serves no call larger than the gate's largest (manifest gate_max_bytes)."""


class ModelConfig(BaseModel):
    """The dimensions of one real model that the ops see (unsharded, TP=1)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int


@functools.cache
def models() -> tuple[ModelConfig, ...]:
    data = tomllib.loads((specs_dir() / "models.toml").read_text())
    return tuple(ModelConfig(name=name, **fields) for name, fields in data["models"].items())


@functools.cache
def _load_all() -> dict[str, KernelSpec]:
    specs = {}
    for path in sorted(Path(specs_dir()).glob("*.toml")):
        if path.name == "models.toml":
            continue
        try:
            spec = KernelSpec(**tomllib.loads(path.read_text()))
        except Exception as exc:  # a broken spec file names itself
            raise AstraError(f"invalid kernel spec {path.name}: {exc}".splitlines()[0]) from exc
        specs[spec.name] = spec
    return specs


def all_specs() -> list[KernelSpec]:
    return list(_load_all().values())


def get_spec(name: str) -> KernelSpec:
    specs = _load_all()
    if name not in specs:
        raise AstraError(f"unknown kernel {name!r}; known: {', '.join(sorted(specs))}")
    return specs[name]


def model_shapes(spec: KernelSpec) -> list[tuple[int, ...]]:
    """Every model config crossed with every token count, deduplicated, in a stable order."""
    shapes: list[tuple[int, ...]] = []
    for model in models():
        for tokens in spec.shapes.tokens:
            dims = {"tokens": tokens, **{d: getattr(model, f) for d, f in spec.shapes.model_dims.items()}}
            shape = tuple(dims[d] for d in spec.dims)
            if shape not in shapes and spec.supports(shape):
                shapes.append(shape)
    return shapes


def parse_shape_list(spec: KernelSpec, text: str) -> list[tuple[int, ...]]:
    """"16x4096,32x8192" -> [(16, 4096), (32, 8192)]."""
    shapes = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        try:
            shape = tuple(int(x) for x in item.lower().split("x"))
        except ValueError:
            raise AstraError(f"bad shape {item!r}: write dims joined by 'x', e.g. 16x4096") from None
        if len(shape) != len(spec.dims):
            raise AstraError(f"shape {item!r} needs {len(spec.dims)} dims ({'x'.join(spec.dims)})")
        shapes.append(shape)
    return shapes


def profile_shapes(spec: KernelSpec, path: Path) -> list[tuple[int, ...]]:
    """The shapes a live server ran `spec`'s op with, from an `astra-sglang profile` JSON (most-called first)."""
    from astra_sglang.profile.records import Profile

    if not path.is_file():
        raise AstraError(f"shape source not found: {path}")
    try:
        profile = Profile.model_validate_json(path.read_text())
    except ValueError as exc:
        raise AstraError(f"{path} is not an astra-sglang profile: {str(exc).splitlines()[0]}") from None
    shapes = [s for s in profile.shapes_of(spec.name) if len(s) == len(spec.dims) and spec.supports(s)]
    if not shapes:
        raise AstraError(f"{path} records no call of {spec.name} (profiled ops: "
                         f"{', '.join(sorted({o.op for p in profile.phases for o in p.ops})) or 'none'})")
    return shapes


def resolve_shapes(spec: KernelSpec, selector: str) -> list[tuple[int, ...]]:
    """A named set (quick, paper, models, edge, held_out, all, gate; joined with '+'), an explicit list, or a
    profile's JSON (the shapes the server ran)."""
    if selector.endswith(".json"):
        return profile_shapes(spec, Path(selector))
    parts = selector.split("+")
    if not all(p in SHAPE_SETS for p in parts):
        return parse_shape_list(spec, selector)
    out: list[tuple[int, ...]] = []
    for part in parts:
        if part == "models":
            chosen = model_shapes(spec)
        elif part == "all":
            chosen = [tuple(s) for s in spec.shapes.paper + spec.shapes.edge + spec.shapes.held_out]
            chosen += model_shapes(spec)
        elif part == "gate":
            chosen = [s for name in GATE for s in resolve_shapes(spec, name)]
        else:
            chosen = [tuple(s) for s in getattr(spec.shapes, part)]
        out += [s for s in chosen if s not in out]
    return out
