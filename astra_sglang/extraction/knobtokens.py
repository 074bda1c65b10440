"""libclang's tokens and function definitions of an extracted kernel.cu, and the small expression helpers the
knob finder (knobsites.py) reads them with: bracket matching, argument lists, a local variable's initializer,
a named constant's value.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from clang import cindex
from clang.cindex import CursorKind

from astra_sglang.errors import AstraError
from astra_sglang.extraction import hostcode

_INT = re.compile(r"^(0[xX][0-9a-fA-F]+|\d+)([uUlL]*)$")
_SUFFIX_TYPE = {"u": "unsigned", "l": "long", "ul": "unsigned long", "lu": "unsigned long", "ll": "long long",
                "ull": "unsigned long long", "llu": "unsigned long long"}
_TYPE_WORDS = {"int", "unsigned", "long", "short", "char", "auto", "const", "constexpr", "static", "size_t",
               "uint32_t", "int32_t", "int64_t", "uint64_t", "dim3"}


@dataclass(frozen=True)
class Tok:
    text: str
    kind: str
    start: int
    end: int


@dataclass
class Func:
    """A function definition of the file: its range, tokens, and where its template list closes."""

    name: str
    start: int
    end: int
    line: int
    tokens: list[Tok]
    template_close: int = -1
    """Offset of the `>` closing its `template <...>` list; -1 for a plain function."""
    is_kernel: bool = False


def parse(path: Path, text: str) -> cindex.TranslationUnit:
    """libclang's view of an extracted kernel.cu (it builds on its own: only the project's ABI header)."""
    from astra_sglang.extraction import clang_env
    from astra_sglang.extraction.records import SourceRoot
    from astra_sglang.paths import templates_dir

    env = clang_env.make_env(SourceRoot(kind="extracted", root=path.parent, origin=str(path), std="c++20"))
    args = [*env.args, f"-I{templates_dir()}"]
    try:
        return cindex.Index.create().parse(str(path), args=args, unsaved_files=[(str(path), text)])
    except cindex.TranslationUnitLoadError as exc:
        raise AstraError(f"libclang could not parse {path}: {exc}") from exc


def file_tokens(tu: cindex.TranslationUnit, path: Path, text: str) -> list[Tok]:
    f = tu.get_file(str(path))
    extent = cindex.SourceRange.from_locations(cindex.SourceLocation.from_offset(tu, f, 0),
                                               cindex.SourceLocation.from_offset(tu, f, len(text)))
    return [Tok(t.spelling, t.kind.name, t.extent.start.offset, t.extent.end.offset)
            for t in tu.get_tokens(extent=extent)]


def slice_tokens(tokens: list[Tok], start: int, end: int) -> list[Tok]:
    return [t for t in tokens if start <= t.start and t.end <= end]


def match(tokens: list[Tok], i: int, opening: str, closing: str) -> int:
    """Index of the token closing the bracket opened at tokens[i] (`>>` closes two template lists)."""
    depth = 0
    for j in range(i, len(tokens)):
        s = tokens[j].text
        depth += (s == opening) - (s == closing) - (2 if opening == "<" and s == ">>" else 0)
        if depth <= 0:
            return j
    return len(tokens) - 1


def template_close(toks: list[Tok]) -> int:
    if len(toks) > 1 and toks[0].text == "template" and toks[1].text == "<":
        return toks[match(toks, 1, "<", ">")].start
    return -1


def functions(tu: cindex.TranslationUnit, path: Path, text: str, tokens: list[Tok]) -> tuple[dict, Func]:
    """Host-only function definitions and __global__ functions of the file by name, and the ASTRA_ENTRY."""
    found: dict[str, list[Func]] = {}
    kinds = (CursorKind.FUNCTION_DECL, CursorKind.FUNCTION_TEMPLATE, CursorKind.CXX_METHOD)
    for cur in tu.cursor.walk_preorder():
        if cur.kind not in kinds or not cur.is_definition() or cur.location.file is None \
                or Path(cur.location.file.name) != path or cur.spelling == "astra_launch":
            continue
        kernel = any(ch.kind == CursorKind.CUDAGLOBAL_ATTR for ch in cur.get_children())
        if not kernel and not hostcode.is_host_only(cur, text):
            continue
        start, end = cur.extent.start.offset, cur.extent.end.offset
        toks = slice_tokens(tokens, start, end)
        found.setdefault(cur.spelling, []).append(
            Func(cur.spelling, start, end, cur.location.line, toks, template_close(toks), kernel))
    m = re.search(r"^ASTRA_ENTRY\s*\{", text, re.M)
    if not m:
        raise AstraError("no ASTRA_ENTRY in the source: not an extracted kernel.cu")
    toks = [t for t in tokens if t.start >= m.start()]
    close = match(toks, 1, "{", "}")
    entry = Func("astra_launch", m.start(), toks[close].end, text.count("\n", 0, m.start()) + 1, toks[:close + 1])
    return found, entry


def int_literal(tok: Tok) -> tuple[int, str] | None:
    m = _INT.match(tok.text)
    if tok.kind != "LITERAL" or not m:
        return None
    return int(m.group(1), 0), _SUFFIX_TYPE.get(m.group(2).lower(), "")


def expr_after(toks: list[Tok], i: int) -> list[Tok]:
    """Tokens of the expression starting at toks[i], up to a `;`, `,` or `)` at depth 0."""
    depth, out = 0, []
    for t in toks[i:]:
        if depth == 0 and t.text in (";", ",", ")", "}", ">>>"):
            break
        depth += (t.text in ("(", "{", "[")) - (t.text in (")", "}", "]"))
        out.append(t)
    return out


def args_of(toks: list[Tok], open_i: int, close_i: int) -> list[list[Tok]]:
    """Top-level comma-separated arguments between the brackets at open_i and close_i."""
    out, cur, depth = [], [], 0
    for t in toks[open_i + 1:close_i]:
        if t.text == "," and depth == 0:
            out.append(cur)
            cur = []
            continue
        depth += (t.text in ("(", "{", "[", "<")) - (t.text in (")", "}", "]", ">"))
        cur.append(t)
    return out + ([cur] if cur else [])


def definition(f: Func, name: str) -> list[Tok]:
    """The initializer of local variable `name` in `f` (`T name = e;`, `T name(e);`, `T name{e};`)."""
    toks = f.tokens
    for i, t in enumerate(toks[1:-1], 1):
        prev = toks[i - 1]
        if t.text != name or not (prev.kind == "IDENTIFIER" or prev.text in _TYPE_WORDS or prev.text in (">", "*")):
            continue
        nxt = toks[i + 1].text
        if nxt == "=":
            return expr_after(toks, i + 2)
        if nxt in ("(", "{"):
            return toks[i + 2:match(toks, i + 1, nxt, {"(": ")", "{": "}"}[nxt])]
    return []


def evaluate(tu: cindex.TranslationUnit, tok: Tok) -> int | None:
    """The value of the constant a token names (clang_Cursor_Evaluate, which the Python bindings do not wrap)."""
    import ctypes

    lib = cindex.conf.lib
    f = tu.get_file(tu.spelling)
    cur = cindex.Cursor.from_location(tu, cindex.SourceLocation.from_offset(tu, f, tok.start))
    ref = cur.referenced if cur is not None else None
    if ref is None:
        return None
    lib.clang_Cursor_Evaluate.argtypes, lib.clang_Cursor_Evaluate.restype = [cindex.Cursor], ctypes.c_void_p
    lib.clang_EvalResult_getKind.argtypes, lib.clang_EvalResult_getKind.restype = [ctypes.c_void_p], ctypes.c_int
    lib.clang_EvalResult_getAsLongLong.argtypes = [ctypes.c_void_p]
    lib.clang_EvalResult_getAsLongLong.restype = ctypes.c_longlong
    lib.clang_EvalResult_dispose.argtypes = [ctypes.c_void_p]
    result = lib.clang_Cursor_Evaluate(ref)
    if not result:
        return None
    try:
        return int(lib.clang_EvalResult_getAsLongLong(result)) if lib.clang_EvalResult_getKind(result) == 1 else None
    finally:
        lib.clang_EvalResult_dispose(result)
