"""Knobs derived from an extracted kernel.cu: its launch path's tunable integers as `ASTRA_KNOB_*` template
parameters, with the `// astra:knob` lines and the `astra_launch_cfg<...>` the tuner already understands.

Every knob is threaded as a defaulted template parameter through the launch path: the generated
`ASTRA_ENTRY` becomes `astra_launch_cfg<knobs...>`, each host function it reaches gains the parameters and
its callers pass them on, and a kernel whose body holds a site gains its own ones. The default entry
calls `astra_launch_cfg<original values...>`, so the knobbed file still is the original at its defaults.
Candidate values stay in what is legal: block sizes are multiples of 32 up to 1024, vector widths divide
the 16-byte alignment the launchers check; what a value breaks anyway (a static_assert) the tuner finds
by building each configuration alone (optimize/tuner/screen.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import jinja2

from astra_sglang.errors import AstraError
from astra_sglang.extraction.knobsites import LaunchPath, Site, launch_path
from astra_sglang.extraction.knobtokens import Func, Tok, match
from astra_sglang.kernels.knobs import DERIVED_MARK
from astra_sglang.paths import templates_dir

KNOBBED_NAME = "knobbed.cu"
ALIGN_BYTES = 16
"""The launchers check 16-byte alignment: vector widths must divide it."""


@dataclass(frozen=True)
class DerivedKnob:
    name: str
    kind: str
    default: int
    values: tuple[int, ...]
    where: str


@dataclass
class Derivation:
    source: str
    """The knobbed source; the input unchanged where no knob was derived."""
    knobs: list[DerivedKnob]
    notes: list[str] = field(default_factory=list)

    def summary(self, label: str) -> str:
        if not self.knobs:
            why = f" ({self.notes[0]})" if self.notes else ""
            return f"{label}: no derivable knob in the launch path{why}"
        return f"{label}: {len(self.knobs)} knobs derived: " + "; ".join(
            f"{k.name} {'/'.join(map(str, k.values))} (original {k.default})" for k in self.knobs)


def _pow2_around(v: int, lo_k: int, hi_k: int) -> list[int]:
    out = [v << k if k >= 0 else v >> -k for k in range(lo_k, hi_k + 1) if k >= 0 or v % (1 << -k) == 0]
    return sorted({x for x in out if x >= 1})


def candidates(site: Site) -> tuple[int, ...]:
    """The values the tuner tries: powers of two around the original, bounded by what is legal."""
    v = site.value
    if site.kind == "block" or (site.kind in ("template_arg", "constexpr") and
                                any(w in site.name for w in ("THREAD", "BLOCK")) and v % 32 == 0):
        values = [x for x in _pow2_around(v, -3, 2) if 64 <= x <= 1024 and x % 32 == 0]
    elif site.kind == "vec_bytes":
        values = [x for x in (4, 8, 16) if ALIGN_BYTES % x == 0]
    elif site.kind == "unroll":
        values = [1, 2, 4, 8]
    elif v & (v - 1) == 0:
        values = _pow2_around(v, -2, 2)
    else:
        values = [x for x in (v // 2 if v % 2 == 0 else 0, 2 * v) if x >= 1]
    return tuple(sorted(set(values) | {v}))


def derive(path: Path, text: str | None = None) -> Derivation:
    """`path`'s knobbed source; no knob (and the reason) where its launch path fixes no tunable integer."""
    path = Path(path).resolve()
    text = path.read_text() if text is None else text
    if "astra:knob" in text:
        return Derivation(text, [], [f"{path.name} already declares its knobs"])
    lp = launch_path(path, text)
    if not lp.sites:
        return Derivation(text, [], lp.notes or ["no block size, vector width, template literal or loop constant "
                                                 "is fixed on the way from ASTRA_ENTRY to the kernel"])
    knobs = [DerivedKnob(s.name, s.kind, s.value, candidates(s), s.where) for s in lp.sites]
    try:
        return Derivation(_rewrite(lp, knobs), knobs, lp.notes)
    except _Underivable as exc:
        return Derivation(text, [], [str(exc), *lp.notes])


class _Underivable(Exception):
    pass


def _macros():
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(templates_dir() / "tuner"), keep_trailing_newline=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    return env.get_template("derived_knobs.cu.j2").module


def _rewrite(lp: LaunchPath, knobs: list[DerivedKnob]) -> str:
    edits: list[tuple[int, int, str]] = []
    by_kernel: dict[str, list[Site]] = {}
    for s in lp.sites:
        knob = f"ASTRA_KNOB_{s.name}"
        value = f"({knob})" if s.kind == "unroll" else (f"static_cast<{s.cast}>({knob})" if s.cast else knob)
        edits += [(a, b, value) for a, b in s.ranges]
        if s.kernel:
            by_kernel.setdefault(s.kernel, []).append(s)
    everything = [(k.name, k.default) for k in knobs]
    path_funcs = [lp.entry, *lp.functions]
    for g in lp.functions:  # each host function on the path takes every knob
        edits += _add_params(g, everything) + _pass_params(path_funcs, g, [n for n, _ in everything])
    for kernel in lp.kernels:
        own = [(s.name, s.value) for s in by_kernel.get(kernel.name, [])]
        if own:
            edits += _add_params(kernel, own) + _pass_params(path_funcs, kernel, [n for n, _ in own])
    m = _macros()
    entry_at = lp.entry.start
    edits.append((entry_at, entry_at + len("ASTRA_ENTRY"), str(m.cfg_signature(knobs))))
    edits.append((lp.entry.end, lp.entry.end, str(m.default_entry(knobs))))
    head_at = lp.text.find("// Configuration the closure was taken under")
    edits.append((max(head_at, 0), max(head_at, 0), str(m.header(knobs, DERIVED_MARK))))
    text = lp.text
    for a, b, new in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
        text = text[:a] + new + text[b:]
    return text


def _add_params(f: Func, params: list[tuple[str, int]]) -> list[tuple[int, int, str]]:
    decl = ", ".join(f"int ASTRA_KNOB_{n} = {v}" for n, v in params)
    if f.template_close < 0:
        return [(f.start, f.start, f"template <{decl}>\n")]
    empty = f.tokens[2].start == f.template_close  # `template <>`: an explicit specialization
    if empty:
        raise _Underivable(f"{f.name} is an explicit specialization on the launch path")
    return [(f.template_close, f.template_close, f", {decl}")]


def _pass_params(path_funcs: list[Func], g: Func, names: list[str]) -> list[tuple[int, int, str]]:
    """At every use of `g` on the launch path: its template arguments gain the knobs."""
    args = ", ".join(f"ASTRA_KNOB_{n}" for n in names)
    out = []
    for f in path_funcs:
        toks: list[Tok] = f.tokens
        for i, t in enumerate(toks[:-1]):
            if t.text != g.name or t.kind != "IDENTIFIER" or (i and toks[i - 1].text in (".", "->")):
                continue
            if f is g and i == _declarator(g):
                continue
            nxt = toks[i + 1].text
            if nxt == "<":
                close = toks[match(toks, i + 1, "<", ">")]
                out.append((close.start, close.start, f", {args}" if close.start != toks[i + 2].start else args))
            elif g.template_close < 0:
                out.append((t.end, t.end, f"<{args}>"))
            else:
                raise _Underivable(f"{f.name} uses {g.name} with deduced template arguments: cannot pass knobs")
    return out


def _declarator(g: Func) -> int:
    """Index of `g`'s own name in its definition (its first occurrence after the template list)."""
    after = next((i for i, t in enumerate(g.tokens) if t.start > g.template_close), 0)
    return next(i for i, t in enumerate(g.tokens[after:], after) if t.text == g.name)


def write_knobbed(kernel_cu: Path) -> tuple[Path | None, Derivation]:
    """Derive `kernel_cu`'s knobs into knobbed.cu beside it (None where there are none)."""
    kernel_cu = Path(kernel_cu)
    if not kernel_cu.is_file():
        raise AstraError(f"extracted source not found: {kernel_cu}")
    derivation = derive(kernel_cu)
    if not derivation.knobs:
        return None, derivation
    out = kernel_cu.with_name(KNOBBED_NAME)
    out.write_text(derivation.source)
    return out, derivation
