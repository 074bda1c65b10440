"""The shapes a live server ran each op with, from an `astra-sglang profile` JSON: the part of a profile that a
shape source reads (`bench OP --shapes profile.json`, `optimize --shapes`). profile/records.py writes the whole
profile with these records in it; this layer reads them without the profile package.
"""
from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

from astra_sglang.errors import AstraError
from astra_sglang.specs.records import KernelSpec


class OpShapes(BaseModel):
    """The shapes one spec op ran with, in the spec's dim order, with how many calls each."""

    op: str
    dtype: str
    shapes: list[tuple[int, ...]]
    calls: list[int]


class PhaseShapes(BaseModel):
    ops: list[OpShapes] = Field(default_factory=list)


class ProfiledShapes(BaseModel):
    """A profile JSON as a shape source: its phases' ops (its other fields are not read)."""

    phases: list[PhaseShapes]

    def shapes_of(self, op: str) -> list[tuple[int, ...]]:
        """Every shape `op` ran with in any phase, most-called first: a shape source for bench/optimize."""
        counts: dict[tuple[int, ...], int] = {}
        for phase in self.phases:
            for entry in phase.ops:
                if entry.op == op:
                    for shape, calls in zip(entry.shapes, entry.calls):
                        counts[tuple(shape)] = counts.get(tuple(shape), 0) + calls
        return sorted(counts, key=lambda s: -counts[s])


def profile_shapes(spec: KernelSpec, path: Path) -> list[tuple[int, ...]]:
    """The shapes a live server ran `spec`'s op with, from an `astra-sglang profile` JSON (most-called first)."""
    if not path.is_file():
        raise AstraError(f"shape source not found: {path}")
    try:
        profile = ProfiledShapes.model_validate_json(path.read_text())
    except ValueError as exc:
        raise AstraError(f"{path} is not an astra-sglang profile: {str(exc).splitlines()[0]}") from None
    shapes = [s for s in profile.shapes_of(spec.name) if len(s) == len(spec.dims) and spec.supports(s)]
    if not shapes:
        raise AstraError(f"{path} records no call of {spec.name} (profiled ops: "
                         f"{', '.join(sorted({o.op for p in profile.phases for o in p.ops})) or 'none'})")
    return shapes
