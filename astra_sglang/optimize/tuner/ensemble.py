"""Per-shape dispatch among whole kernel files: one source whose entry sends each call to the member that
was measured fastest at the nearest measured shape, or declines where the original op was faster.

Members keep their own code: each goes into a namespace of its own with its entry turned into a static
function (ASTRA_ENTRY is redefined around it, an entry spelled out as `extern "C" ... astra_launch(` is
renamed), its #include lines are hoisted to the top (headers have include guards), and the macros it
defines are #undef'd after it, so one member's macros cannot rename another's identifiers.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import jinja2

from astra_sglang.errors import AstraError
from astra_sglang.kernels.knobs import dim_sources
from astra_sglang.paths import templates_dir
from astra_sglang.specs.records import KernelSpec

DTYPE_CODES = {"float32": 0, "float16": 1, "bfloat16": 2}
"""astra_abi.h's AstraDType codes."""
ORIGINAL = -1
_INCLUDE = re.compile(r"^[ \t]*#[ \t]*include\b.*$", re.M)
_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)", re.M)
_ENTRY = re.compile(r'extern\s+"C"\s*(__attribute__\s*\(\(\s*visibility\s*\(\s*"default"\s*\)\s*\)\)\s*)?'
                    r'int\s+astra_launch\s*\(')


@dataclass(frozen=True)
class Member:
    name: str
    source: str


def split_member(source: str) -> tuple[list[str], str, list[str]]:
    """(its #include lines, its body without them and with its entry made static, the macros it defines)."""
    includes = [m.group(0).strip() for m in _INCLUDE.finditer(source)]
    body = _ENTRY.sub("static int astra_member_entry(", _INCLUDE.sub("", source))
    defines = list(dict.fromkeys(_DEFINE.findall(body)))
    return includes, body.strip(), defines


def ensemble_source(spec: KernelSpec, members: list[Member], choice: dict[tuple[tuple[int, ...], str], int],
                    note: str) -> str:
    """`choice`: (shape, dtype) -> index into `members`, or ORIGINAL (-1) to decline there."""
    if not choice:
        raise AstraError(f"{spec.name}: a dispatch needs at least one measured shape")
    dtype_tensor = next((i for i, a in enumerate(spec.tensor_args) if a.dtype == "T"), 0)
    includes: list[str] = []
    parts = []
    for m in members:
        found, body, defines = split_member(m.source)
        includes += [line for line in found if line not in includes]
        parts.append({"name": m.name, "body": body, "defines": defines})
    rows = [{"shape": shape, "dtype": dtype, "code": DTYPE_CODES[dtype], "member": member,
             "label": members[member].name if member >= 0 else "the original",
             "log2": [f"{math.log2(max(n, 1)):.6f}" for n in shape]}
            for (shape, dtype), member in sorted(choice.items())]
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(templates_dir() / "tuner"), keep_trailing_newline=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    return env.get_template("ensemble.cu.j2").render(
        note=note, includes=includes, members=parts, rows=rows, dims=dim_sources(spec),
        num_tensors=len(spec.tensor_args), dtype_tensor=dtype_tensor)


def choose(speedups: list[dict[tuple[tuple[int, ...], str], float]], floor: float = 1.0
           ) -> dict[tuple[tuple[int, ...], str], int]:
    """Per (shape, dtype): the member with the highest speedup there when it is above `floor`, else ORIGINAL.
    `speedups[i]` holds member i's measured speedups (a member that failed anywhere must not be passed)."""
    keys = sorted({k for s in speedups for k in s})
    out = {}
    for key in keys:
        best = max(range(len(speedups)), key=lambda i: speedups[i].get(key, 0.0))
        out[key] = best if speedups[best].get(key, 0.0) > floor else ORIGINAL
    return out
