"""Parse one CUDA file with libclang and cut the source files into top-level units (declarations, macros).

A unit is a byte range of a file, not a cursor: libclang's extents can begin inside a macro definition
(a declaration that starts with a macro) or omit a `template<...>` prefix (variable templates), and
tokenizing a cursor follows macro spellings, so ranges are fixed up and tokenized from the file text.
"""
from __future__ import annotations

import bisect
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from clang import cindex
from clang.cindex import CursorKind

from astra_sglang.errors import AstraError
from astra_sglang.extraction.records import ClangEnv, Unit

SCOPES = (CursorKind.NAMESPACE,)
_SKIP = re.compile(r"\s+|//[^\n]*|/\*.*?\*/", re.S)
_LEX = re.compile(r"""//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'|[A-Za-z_]\w*""", re.S)


def identifiers(text: str, base: int = 0) -> list[tuple[int, str]]:
    """(offset, name) of every identifier outside comments and literals, `#if`'d-out code included."""
    return [(m.start() + base, m.group()) for m in _LEX.finditer(text) if m.group()[0].isalpha() or m.group()[0] == "_"]


@dataclass
class FileText:
    path: Path
    text: str
    idents: list[tuple[int, str]] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)

    def tokens(self, start: int, end: int) -> list[str]:
        if not self.idents:
            self.idents = identifiers(self.text)
            self.offsets = [o for o, _ in self.idents]
        lo, hi = bisect.bisect_left(self.offsets, start), bisect.bisect_left(self.offsets, end)
        return [name for _, name in self.idents[lo:hi]]


@dataclass
class Parsed:
    """A parsed translation unit cut into units, with the lookups the closure passes need."""

    tu: cindex.TranslationUnit
    units: list[Unit]
    cursors: dict[Unit, list[cindex.Cursor]]
    by_file: dict[Path, list[Unit]]
    texts: dict[Path, FileText]
    order_of: dict[Path, tuple[int, ...]]
    project: list[Path]
    seconds: float

    def unit_at(self, path: Path, offset: int) -> Unit | None:
        units = self.by_file.get(path, [])
        i = bisect.bisect_right([u.start for u in units], offset) - 1
        return units[i] if i >= 0 and units[i].start <= offset < max(units[i].end, units[i].start + 1) else None


def parse(path: Path, env: ClangEnv) -> cindex.TranslationUnit:
    index = cindex.Index.create()
    try:
        return index.parse(str(path), args=list(env.args),
                           options=cindex.TranslationUnit.PARSE_DETAILED_PROCESSING_RECORD)
    except cindex.TranslationUnitLoadError as exc:
        raise AstraError(f"libclang could not parse {path}: {exc}") from exc


def _skip_back_template(text: str, start: int) -> int:
    """Move `start` back over `template <...>` prefixes that the cursor's extent left out."""
    while True:
        j = start
        while j > 0 and text[j - 1].isspace():
            j -= 1
        if j == 0 or text[j - 1] != ">":
            return start
        depth, k = 0, j - 1
        while k >= 0:
            depth += {">": 1, "<": -1}.get(text[k], 0)
            if depth == 0:
                break
            k -= 1
        m = re.search(r"template\s*$", text[:k])
        if k < 0 or not m:
            return start
        start = m.start()


def _skip_forward(text: str, pos: int) -> int:
    """First position at or after `pos` that is not whitespace, a comment or a preprocessor line."""
    while pos < len(text):
        m = _SKIP.match(text, pos)
        if m and m.end() > pos:
            pos = m.end()
            continue
        if text[pos] == "#":
            while pos < len(text):
                eol = text.find("\n", pos)
                eol = len(text) if eol < 0 else eol
                continuing = text[:eol].rstrip().endswith("\\")
                pos = eol + 1
                if not continuing:
                    break
            continue
        return pos
    return pos


def cut_units(tu: cindex.TranslationUnit, project: list[Path], main: Path) -> Parsed:
    start_t = time.perf_counter()
    order_of = _file_orders(tu, main)
    texts: dict[Path, FileText] = {}
    units: list[Unit] = []
    cursors: dict[Unit, list[cindex.Cursor]] = {}

    resolved: dict[str, tuple[Path, bool]] = {}

    def where(name: str) -> tuple[Path, bool]:  # cached: a TU has ~10^5 cursors in system headers
        if name not in resolved:
            p = Path(name).resolve()
            resolved[name] = (p, p == main or any(p.is_relative_to(r) for r in project))
        return resolved[name]

    def text_of(p: Path) -> FileText:
        if p not in texts:
            texts[p] = FileText(p, p.read_bytes().decode("utf-8", errors="replace"))
        return texts[p]

    def visit(parent: cindex.Cursor, spaces: tuple[tuple[str, bool], ...], floor: dict[Path, int]) -> None:
        for cur in parent.get_children():
            loc = cur.location
            if loc.file is None:
                continue
            p, mine = where(loc.file.name)
            if not mine:
                continue
            ft = text_of(p)
            if cur.kind in SCOPES:
                lbrace = ft.text.find("{", loc.offset)
                inline = "inline" in ft.text[cur.extent.start.offset:loc.offset] if cur.extent.start.file else False
                inner = dict(floor)
                inner[p] = lbrace + 1
                visit(cur, spaces + ((cur.spelling, inline),), inner)
                floor[p] = _end_of(cur, ft)
                continue
            if cur.kind == CursorKind.MACRO_INSTANTIATION or cur.kind == CursorKind.INCLUSION_DIRECTIVE:
                continue
            ext = cur.extent
            if cur.kind == CursorKind.MACRO_DEFINITION:
                start, end = ext.start.offset, ext.end.offset
                key = (cur.kind.name, cur.spelling, p, start)
            else:
                start = ext.start.offset if ext.start.file and Path(ext.start.file.name).resolve() == p else -1
                if start < 0 or start > loc.offset:  # extent begins in a macro's definition
                    start = _skip_forward(ft.text, floor.get(p, 0))
                start = _skip_back_template(ft.text, start)
                end = _end_of(cur, ft)
                floor[p] = max(floor.get(p, 0), end)
                key = None
            unit = Unit(p, start, end, cur.kind.name, cur.spelling, () if key else spaces,
                        order_of.get(p, (1 << 30,)) + (start,))
            if unit not in cursors:
                units.append(unit)
                cursors[unit] = []
            cursors[unit].append(cur)

    visit(tu.cursor, (), {})
    by_file: dict[Path, list[Unit]] = {}
    for u in units:
        if not u.is_macro:
            by_file.setdefault(u.file, []).append(u)
    for lst in by_file.values():
        lst.sort(key=lambda u: u.start)
    return Parsed(tu, units, cursors, by_file, texts, order_of, project, time.perf_counter() - start_t)


def _end_of(cur: cindex.Cursor, ft: FileText) -> int:
    end = cur.extent.end.offset
    if cur.extent.end.file is None or Path(cur.extent.end.file.name).resolve() != ft.path:
        end = cur.location.offset  # ends inside a macro: fall back to the statement's own text
        depth = 0
        while end < len(ft.text):
            ch = ft.text[end]
            depth += {"{": 1, "(": 1, "}": -1, ")": -1}.get(ch, 0)
            end += 1
            if depth == 0 and ch in ";}":
                break
    m = re.compile(r"\s*;").match(ft.text, end)  # class bodies and variables: keep their `;`
    return m.end() if m else end


def _file_orders(tu: cindex.TranslationUnit, main: Path) -> dict[Path, tuple[int, ...]]:
    """Each file's position in the preprocessed TU: the include offsets leading to its first inclusion."""
    orders: dict[Path, tuple[int, ...]] = {main: ()}
    for inc in tu.get_includes():
        if inc.source is None:  # the CUDA wrapper that clang pre-includes
            continue
        child = Path(inc.include.name).resolve()
        parent = Path(inc.source.name).resolve()
        if child not in orders and parent in orders:
            orders[child] = orders[parent] + (inc.location.offset,)
    return orders
