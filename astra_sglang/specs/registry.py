"""Load kernel specs (the package's extract/<op>.toml merged with the user folder's specs/<op>.toml, the user's
winning) and model configs (extract/models.toml); resolve shape sets.

A spec file that does not load never hides the others: it is kept as one error line naming the file and the
field (`spec_errors`), and only asking for that op raises it.
"""
from __future__ import annotations

import functools
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from astra_sglang.errors import AstraError
from astra_sglang.paths import specs_dir, user_ops_dir, user_specs_dir
from astra_sglang.specs.profiled import profile_shapes
from astra_sglang.specs.records import KernelSpec

SHAPE_SETS = ("quick", "paper", "models", "edge", "held_out", "all", "gate", "served")
GATE = ("quick", "paper", "models", "edge", "held_out")
"""The acceptance gate a winner must pass before it is written as a patch: every named set, so the largest
token count of each, 1 token, the widths that are not a multiple of a vector width (edge) and every real
model's shapes; the patch then serves no call larger than the gate's largest (manifest gate_max_bytes)."""
NOT_SPECS = frozenset({"models.toml"})


class ModelConfig(BaseModel):
    """The dimensions of one real model that the ops see (unsharded, TP=1)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int


class RouterConfig(BaseModel):
    """The MoE router of one real model: experts per MoE layer and the experts each token is routed to."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    experts: int
    topk: int


ROUTER_FIELDS = frozenset(RouterConfig.model_fields) - {"name"}


@functools.cache
def _models_toml() -> dict:
    return tomllib.loads((specs_dir() / "models.toml").read_text())


@functools.cache
def models() -> tuple[ModelConfig, ...]:
    return tuple(ModelConfig(name=name, **fields) for name, fields in _models_toml()["models"].items())


@functools.cache
def routers() -> tuple[RouterConfig, ...]:
    return tuple(RouterConfig(name=name, **fields) for name, fields in _models_toml().get("routers", {}).items())


def configs_for(spec: KernelSpec) -> tuple[ModelConfig, ...] | tuple[RouterConfig, ...]:
    """The configs a spec's model shapes come from: the MoE routers where its model_dims name only router fields
    (experts, topk), else the dense models."""
    fields = set(spec.shapes.model_dims.values())
    return routers() if fields and fields <= ROUTER_FIELDS else models()


def spec_error(path: Path, exc: Exception) -> str:
    """One line: the file, the field path (pydantic's loc) and what is wrong with it."""
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        msg = first["msg"].removeprefix("Value error, ")
        more = f" (+{exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        return f"{path}: {loc + ': ' if loc else ''}{msg}{more}".replace("\n", " ")
    if isinstance(exc, tomllib.TOMLDecodeError):
        return f"{path}: not TOML: {exc}".replace("\n", " ")
    return f"{path}: {exc}".replace("\n", " ")


def load_spec_file(path: Path) -> KernelSpec:
    """One spec file; AstraError with `spec_error`'s line."""
    try:
        spec = KernelSpec(**tomllib.loads(path.read_text()))
    except (ValidationError, tomllib.TOMLDecodeError, ValueError, TypeError, OSError) as exc:
        raise AstraError(spec_error(path, exc)) from None
    if spec.name != path.stem:
        raise AstraError(f"{path}: name: {spec.name!r} differs from the file name {path.stem!r}")
    return spec


@dataclass
class Registry:
    specs: dict[str, KernelSpec] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    """op (file stem) -> the one-line error of its spec file."""
    overrides: dict[str, Path] = field(default_factory=dict)
    """ops whose package spec a user spec replaces -> the user file."""
    paths: dict[str, Path] = field(default_factory=dict)


def spec_folders() -> list[Path]:
    """Package specs first, then the user folder's (later wins)."""
    return [Path(specs_dir()), user_specs_dir()]


@functools.cache
def _load(folders: tuple[Path, ...]) -> Registry:
    reg = Registry()
    for index, folder in enumerate(folders):
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*.toml")):
            if path.name in NOT_SPECS:
                continue
            op = path.stem
            if index and (op in reg.specs or op in reg.errors):
                reg.overrides[op] = path
            reg.specs.pop(op, None)
            reg.errors.pop(op, None)
            try:
                reg.specs[op] = load_spec_file(path)
            except AstraError as exc:
                reg.errors[op] = str(exc)
            reg.paths[op] = path
    return reg


def registry() -> Registry:
    ops = str(user_ops_dir())  # references `onboard` wrote for user specs, imported by module name
    if ops not in sys.path:
        sys.path.append(ops)
    return _load(tuple(spec_folders()))


def reload() -> None:
    """Forget loaded specs (after writing one)."""
    _load.cache_clear()


def all_specs() -> list[KernelSpec]:
    return list(registry().specs.values())


def spec_errors() -> list[str]:
    return list(registry().errors.values())


def get_spec(name: str) -> KernelSpec:
    reg = registry()
    if name in reg.errors:
        raise AstraError(reg.errors[name])
    if name not in reg.specs:
        raise AstraError(f"unknown kernel {name!r}; known: {', '.join(sorted(reg.specs))}")
    return reg.specs[name]



def model_shapes(spec: KernelSpec) -> list[tuple[int, ...]]:
    """Every model config (`configs_for`: dense models or MoE routers) crossed with every token count,
    deduplicated, in a stable order."""
    shapes: list[tuple[int, ...]] = []
    for model in configs_for(spec):
        for tokens in spec.shapes.tokens:
            dims = {"tokens": tokens, **{d: getattr(model, f) for d, f in spec.shapes.model_dims.items()}}
            shape = tuple(dims[d] for d in spec.dims)
            if shape not in shapes and spec.supports(shape):
                shapes.append(shape)
    return shapes


def served_shapes(spec: KernelSpec) -> list[tuple[int, ...]]:
    """The shapes a server runs the op at, for the sandwich timing: the spec's sandwich models (default
    llama-3-8b) crossed with its token counts; none where the spec names no sandwich."""
    if spec.sandwich is None:
        return []
    by_name = {m.name: m for m in models()}
    unknown = [n for n in spec.sandwich.models if n not in by_name]
    if unknown:
        raise AstraError(f"{spec.name}: sandwich.models: {unknown[0]!r} is not in extract/models.toml")
    shapes: list[tuple[int, ...]] = []
    for name in spec.sandwich.models:
        for tokens in spec.shapes.tokens:
            dims = {"tokens": tokens, **{d: getattr(by_name[name], f) for d, f in spec.shapes.model_dims.items()}}
            shape = tuple(dims[d] for d in spec.dims)
            if shape not in shapes and spec.supports(shape):
                shapes.append(shape)
    return shapes


def model_for(spec: KernelSpec, shape: tuple[int, ...]) -> ModelConfig | None:
    """The model whose dims the shape has (the spec's sandwich models first, then extract/models.toml's order)."""
    dims = dict(zip(spec.dims, shape))
    order = [m for n in (spec.sandwich.models if spec.sandwich else []) for m in models() if m.name == n]
    for model in order + list(models()):
        if all(dims.get(d) == getattr(model, f) for d, f in spec.shapes.model_dims.items()):
            return model
    return None


def parse_shape_list(spec: KernelSpec, text: str) -> list[tuple[int, ...]]:
    """"16x4096,32x8192" -> [(16, 4096), (32, 8192)]; AstraError naming the first shape that is not one of the
    op's (not integers, another number of dims, a size below 1, a constraint of the spec that does not hold)."""
    shapes: list[tuple[int, ...]] = []
    example = "x".join(str(s) for s in (spec.shapes.paper or spec.shapes.quick or [[16, 4096]])[0])
    dims = " x ".join(spec.dims)
    for item in filter(None, (s.strip() for s in text.split(","))):
        try:
            shape = tuple(int(x) for x in item.lower().split("x"))
        except ValueError:
            raise AstraError(f"bad shape {item!r}: write {spec.name}'s dims ({dims}) as integers "
                             f"joined by 'x', e.g. {example}") from None
        if len(shape) != len(spec.dims):
            raise AstraError(f"shape {item!r} of {spec.name} needs {len(spec.dims)} dims ({dims}), e.g. {example}")
        check_shape(spec, shape)
        if shape not in shapes:
            shapes.append(shape)
    if not shapes:
        raise AstraError(f"no shape in {text!r}: give a set ({', '.join(SHAPE_SETS)}) or a list like {example}")
    return shapes


def check_shape(spec: KernelSpec, shape: tuple[int, ...]) -> None:
    """AstraError where `shape` is outside the op (KernelSpec.unmet), before anything is built for it."""
    why = spec.unmet(shape)
    if why:
        raise AstraError(f"shape {'x'.join(map(str, shape))} of {spec.name}: {why}")


def shapes_given(spec: KernelSpec, selector: str, option: str = "--shapes") -> list[tuple[int, ...]]:
    """`resolve_shapes` for shapes a user named: AstraError where they come to none (a set the spec leaves empty)."""
    shapes = resolve_shapes(spec, selector)
    if not shapes:
        filled = [n for n in SHAPE_SETS if n not in ("all", "gate") and resolve_shapes(spec, n)]
        raise AstraError(f"{option} {selector}: {spec.name} has no shapes in that set; its sets with shapes: "
                         f"{', '.join(filled)}")
    return shapes


def resolve_shapes(spec: KernelSpec, selector: str) -> list[tuple[int, ...]]:
    """A named set (quick, paper, models, edge, held_out, all, gate, served; joined with '+'), an explicit list,
    or a profile's JSON (the shapes the server ran)."""
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
        elif part == "served":
            chosen = served_shapes(spec)
        else:
            chosen = [tuple(s) for s in getattr(spec.shapes, part)]
        out += [s for s in chosen if s not in out]
    return out
