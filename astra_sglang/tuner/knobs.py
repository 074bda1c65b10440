"""Knobs a kernel exposes to the tuner, and the per-shape dispatch source the tuner generates.

Convention (kernel side): one header line per knob, `// astra:knob NAME v1 v2 ...`; a template
`astra_launch_cfg<NAME1, NAME2, ...>(tensors, num_tensors, scalars, num_scalars, stream)` with the knobs
in that order; the kernel's own entry guarded by `#ifndef ASTRA_NO_DEFAULT_ENTRY`.
"""
from __future__ import annotations

import itertools
import math
import random
import re
from dataclasses import dataclass

import jinja2

from astra_sglang.errors import AstraError
from astra_sglang.paths import templates_dir
from astra_sglang.specs.records import KernelSpec

KNOB_LINE = re.compile(r"^\s*//\s*astra:knob\s+([A-Za-z_]\w*)\s+(.+?)\s*$", re.MULTILINE)
Config = tuple[int, ...]


@dataclass(frozen=True)
class Knob:
    name: str
    values: tuple[int, ...]


def parse_knobs(source: str) -> list[Knob]:
    knobs = []
    for name, values in KNOB_LINE.findall(source):
        try:
            knobs.append(Knob(name, tuple(int(v) for v in values.split())))
        except ValueError:
            raise AstraError(f"knob {name}: values must be integers, got {values!r}") from None
    return knobs


def configs(knobs: list[Knob], limit: int, seed: int = 0) -> list[Config]:
    """Every combination, or a fixed-seed sample of `limit` of them."""
    everything = list(itertools.product(*(k.values for k in knobs)))
    if len(everything) <= limit:
        return everything
    return sorted(random.Random(seed).sample(everything, limit))


@dataclass(frozen=True)
class DimSource:
    name: str
    tensor: int
    axis: int


def dim_sources(spec: KernelSpec) -> list[DimSource]:
    """Where each spec dim can be read at run time: a tensor axis whose shape expression is that dim."""
    found: dict[str, DimSource] = {}
    for index, arg in enumerate(spec.tensor_args):
        for axis, expr in enumerate(arg.shape):
            if isinstance(expr, str) and expr in spec.dims and expr not in found:
                found[expr] = DimSource(expr, index, axis)
    missing = [d for d in spec.dims if d not in found]
    if missing:
        raise AstraError(f"{spec.name}: dims {missing} appear in no tensor shape on their own; cannot dispatch")
    return [found[d] for d in spec.dims]


def dispatch_source(spec: KernelSpec, source: str, knobs: list[Knob], table: dict[tuple[int, ...], Config],
                    note: str) -> str:
    """The kernel with a generated entry: nearest tuned shape -> its configuration."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(templates_dir() / "tuner"), keep_trailing_newline=True,
                             undefined=jinja2.StrictUndefined)
    rows = [{"shape": shape, "config": config, "log2": [f"{math.log2(max(n, 1)):.6f}" for n in shape]}
            for shape, config in table.items()]
    return env.get_template("dispatch.cu.j2").render(
        note=note, source=source, knobs=[k.name for k in knobs], table=rows, dims=dim_sources(spec),
        num_tensors=len(spec.tensor_args))
