"""Where an extracted kernel.cu's launch path fixes a tunable integer (libclang tokens, no text guessing).

The launch path is the generated `ASTRA_ENTRY` and every host function it reaches that is defined in the
file (the source's host entry, the launcher's helpers), plus the `__global__` functions they reference.
Sites found there:

- block: an integer literal (a multiple of 32 in 64..1024) in a variable the launch's block dimension is
  computed from (`<<<grid, BLOCK>>>`, `config.blockDim = ...`, `cudaLaunchKernel(f, grid, BLOCK, ...)`),
  followed back through the path's local variables: `constexpr uint32_t kBlockSize = 256u`, flashinfer's
  `std::min<uint32_t>(1024, d / vec_size)`. 32 is the warp size and never a knob. A literal written into
  the launch itself is left alone: the grid is usually computed from the same number written again.
- vec_bytes: `N / sizeof(T)` on the same path (bytes per vector load); a named constant in that place
  (`device::kMaxVecBytes / sizeof(T)`) only where it is also a template argument of the launched kernel,
  so kernel and launcher keep agreeing on the width; all its uses on the path become the knob.
- template_arg: an integer literal template argument of a launched kernel (`kernel<T, 4><<<...>>>`).
- constexpr / unroll: in a launched kernel's body, `constexpr int N = 4;` used in a `for` header or an
  unroll pragma, and `#pragma unroll 4`; the kernel gains a template parameter for it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
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
WARP = 32


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


@dataclass(frozen=True)
class Site:
    kind: str
    """block | vec_bytes | template_arg | constexpr | unroll"""
    name: str
    """Knob name (the tuner's `// astra:knob NAME`)."""
    value: int
    ranges: tuple[tuple[int, int], ...]
    """Text ranges that become the knob (one literal, or every use of a named constant)."""
    cast: str
    """C++ type the original literal had (its suffix), so the knob keeps it; "" for int."""
    where: str
    kernel: str = ""
    """constexpr / unroll: the kernel whose template gains the parameter."""


@dataclass
class LaunchPath:
    text: str
    entry: Func
    functions: list[Func]
    kernels: list[Func]
    sites: list[Site] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


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


def _tokens(tu: cindex.TranslationUnit, path: Path, text: str) -> list[Tok]:
    f = tu.get_file(str(path))
    extent = cindex.SourceRange.from_locations(cindex.SourceLocation.from_offset(tu, f, 0),
                                               cindex.SourceLocation.from_offset(tu, f, len(text)))
    return [Tok(t.spelling, t.kind.name, t.extent.start.offset, t.extent.end.offset)
            for t in tu.get_tokens(extent=extent)]


def _slice(tokens: list[Tok], start: int, end: int) -> list[Tok]:
    return [t for t in tokens if start <= t.start and t.end <= end]


def _match(tokens: list[Tok], i: int, opening: str, closing: str) -> int:
    """Index of the token closing the bracket opened at tokens[i] (`>>` closes two template lists)."""
    depth = 0
    for j in range(i, len(tokens)):
        s = tokens[j].text
        depth += (s == opening) - (s == closing) - (2 if opening == "<" and s == ">>" else 0)
        if depth <= 0:
            return j
    return len(tokens) - 1


def _template_close(toks: list[Tok]) -> int:
    if len(toks) > 1 and toks[0].text == "template" and toks[1].text == "<":
        return toks[_match(toks, 1, "<", ">")].start
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
        toks = _slice(tokens, start, end)
        found.setdefault(cur.spelling, []).append(
            Func(cur.spelling, start, end, cur.location.line, toks, _template_close(toks), kernel))
    m = re.search(r"^ASTRA_ENTRY\s*\{", text, re.M)
    if not m:
        raise AstraError("no ASTRA_ENTRY in the source: not an extracted kernel.cu")
    toks = [t for t in tokens if t.start >= m.start()]
    close = _match(toks, 1, "{", "}")
    entry = Func("astra_launch", m.start(), toks[close].end, text.count("\n", 0, m.start()) + 1, toks[:close + 1])
    return found, entry


def launch_path(path: Path, text: str) -> LaunchPath:
    tu = parse(path, text)
    tokens = _tokens(tu, path, text)
    defs, entry = functions(tu, path, text, tokens)
    seen, queue, host, kernels = {id(entry)}, [entry], [], []
    while queue:
        f = queue.pop(0)
        for i, t in enumerate(f.tokens):
            if t.kind != "IDENTIFIER" or t.text not in defs or (i and f.tokens[i - 1].text in (".", "->")):
                continue
            for g in defs[t.text]:
                if id(g) not in seen and not (g.start <= t.start < g.end):
                    seen.add(id(g))
                    (kernels if g.is_kernel else host).append(g)
                    if not g.is_kernel:
                        queue.append(g)
    lp = LaunchPath(text, entry, host, kernels)
    find_sites(lp, tu)
    return lp


def _int(tok: Tok) -> tuple[int, str] | None:
    m = _INT.match(tok.text)
    if tok.kind != "LITERAL" or not m:
        return None
    return int(m.group(1), 0), _SUFFIX_TYPE.get(m.group(2).lower(), "")


def _expr_after(toks: list[Tok], i: int) -> list[Tok]:
    """Tokens of the expression starting at toks[i], up to a `;`, `,` or `)` at depth 0."""
    depth, out = 0, []
    for t in toks[i:]:
        if depth == 0 and t.text in (";", ",", ")", "}", ">>>"):
            break
        depth += (t.text in ("(", "{", "[")) - (t.text in (")", "}", "]"))
        out.append(t)
    return out


def _args(toks: list[Tok], open_i: int, close_i: int) -> list[list[Tok]]:
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


def _block_exprs(f: Func) -> list[list[Tok]]:
    toks, out = f.tokens, []
    for i, t in enumerate(toks):
        if t.text == "<<<":
            args = _args(toks, i, _match(toks, i, "<<<", ">>>"))
            if len(args) > 1:
                out.append(args[1])
        elif t.text == "blockDim" and i and toks[i - 1].text in (".", "->") and i + 1 < len(toks) \
                and toks[i + 1].text == "=":
            out.append(_expr_after(toks, i + 2))
        elif t.text in ("cudaLaunchKernel", "cudaLaunchCooperativeKernel") and i + 1 < len(toks) \
                and toks[i + 1].text == "(":
            args = _args(toks, i + 1, _match(toks, i + 1, "(", ")"))
            if len(args) > 2:
                out.append(args[2])
    return out


def _definition(f: Func, name: str) -> list[Tok]:
    """The initializer of local variable `name` in `f` (`T name = e;`, `T name(e);`, `T name{e};`)."""
    toks = f.tokens
    for i, t in enumerate(toks[1:-1], 1):
        prev = toks[i - 1]
        if t.text != name or not (prev.kind == "IDENTIFIER" or prev.text in _TYPE_WORDS or prev.text in (">", "*")):
            continue
        nxt = toks[i + 1].text
        if nxt == "=":
            return _expr_after(toks, i + 2)
        if nxt in ("(", "{"):
            return toks[i + 2:_match(toks, i + 1, nxt, {"(": ")", "{": "}"}[nxt])]
    return []


def _kernel_template_args(path_funcs: list[Func], kernels: list[Func]) -> list[tuple[Func, Func, int, list]]:
    """(path function, kernel, index of the kernel's name token, its template argument token lists)."""
    names = {k.name: k for k in kernels}
    out = []
    for f in path_funcs:
        for i, t in enumerate(f.tokens[:-1]):
            if t.text in names and f.tokens[i + 1].text == "<":
                close = _match(f.tokens, i + 1, "<", ">")
                out.append((f, names[t.text], i, _args(f.tokens, i + 1, close)))
    return out


def find_sites(lp: LaunchPath, tu: cindex.TranslationUnit) -> None:
    path_funcs = [lp.entry, *lp.functions]
    taken: set[int] = set()
    kargs = _kernel_template_args(path_funcs, lp.kernels)

    def add(kind, base, value, ranges, cast, where, kernel=""):
        if ranges[0][0] in taken:
            return
        taken.update(r[0] for r in ranges)
        names = {s.name for s in lp.sites}
        name = base if base not in names else next(f"{base}{n}" for n in range(2, 99) if f"{base}{n}" not in names)
        lp.sites.append(Site(kind, name, value, tuple(ranges), cast, where, kernel))

    for f in path_funcs:
        line = lambda t: lp.text.count("\n", 0, t.start) + 1  # noqa: E731
        for expr in _block_exprs(f):
            if any(_int(t) for t in expr):
                lp.notes.append(f"{f.name} (line {line(expr[0])}): a literal written into the launch itself is "
                                "left alone (the grid is usually computed from the same number again)")
            seen, work = set(), [t.text for t in expr if t.kind == "IDENTIFIER"]
            while work:
                name = work.pop()
                if name in seen:
                    continue
                seen.add(name)
                init = _definition(f, name)
                for j, t in enumerate(init):
                    if t.kind == "IDENTIFIER":
                        work.append(t.text)
                    lit = _int(t)
                    per_sizeof = j + 2 < len(init) and init[j + 1].text == "/" and init[j + 2].text == "sizeof"
                    if lit and per_sizeof and lit[0] >= 2 and lit[0] & (lit[0] - 1) == 0:
                        add("vec_bytes", "VEC_BYTES", lit[0], [(t.start, t.end)], lit[1],
                            f"bytes per vector `{t.text} / sizeof(...)` of {name} in {f.name} (line {line(t)})")
                    elif lit and lit[0] % WARP == 0 and 2 * WARP <= lit[0] <= 1024:
                        add("block", "BLOCK", lit[0], [(t.start, t.end)], lit[1],
                            f"block size `{t.text}` of {name} in {f.name} (line {line(t)})")
                    elif t.kind == "IDENTIFIER" and per_sizeof:
                        _named_vec(lp, tu, init, j, kargs, path_funcs, add)
    for f, kernel, i, args in kargs:
        params = _template_param_names(tu, kernel)
        for n, arg in enumerate(args):
            lit = _int(arg[0]) if len(arg) == 1 else None
            if lit and lit[0] > 1:
                pname = params[n] if n < len(params) else f"ARG{n}"
                add("template_arg", _knob_name(pname), lit[0], [(arg[0].start, arg[0].end)], lit[1],
                    f"template argument {pname} = {arg[0].text} of {kernel.name} in {f.name}")
    for kernel in lp.kernels:
        _kernel_body_sites(lp, kernel, kargs, add)


def _named_vec(lp, tu, init, j, kargs, path_funcs, add) -> None:
    """`NS::kConst / sizeof(T)`: a knob only where the kernel takes the same constant as a template argument."""
    k = j
    while k >= 2 and init[k - 1].text == "::" and init[k - 2].kind == "IDENTIFIER":
        k -= 2
    spelled = [t.text for t in init[k:j + 1]]
    if not any(spelled == [t.text for t in arg] for _, _, _, args in kargs for arg in args):
        lp.notes.append(f"`{''.join(spelled)} / sizeof` sets a vector width the kernel does not take as a template "
                        "argument: left alone (the kernel would not follow it)")
        return
    value = _evaluate(tu, init[j])
    if value is None:
        return
    ranges = []
    for f in path_funcs:
        toks = f.tokens
        for i in range(len(toks) - len(spelled) + 1):
            if [t.text for t in toks[i:i + len(spelled)]] == spelled and not (i and toks[i - 1].text == "::"):
                ranges.append((toks[i].start, toks[i + len(spelled) - 1].end))
    add("vec_bytes", "VEC_BYTES", value, ranges, "", f"vector bytes {''.join(spelled)} = {value} "
        f"({len(ranges)} uses on the launch path)")


def _evaluate(tu: cindex.TranslationUnit, tok: Tok) -> int | None:
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


def _template_param_names(tu, kernel: Func) -> list[str]:
    toks = kernel.tokens
    if kernel.template_close < 0:
        return []
    close = next(i for i, t in enumerate(toks) if t.start == kernel.template_close)
    return [next((t.text for t in reversed([a for a in arg if a.text != "="] if "=" not in [a.text for a in arg]
                                           else arg[:[a.text for a in arg].index("=")])
                  if t.kind == "IDENTIFIER"), "") for arg in _args(toks, 1, close)]


def _knob_name(name: str) -> str:
    name = re.sub(r"^k(?=[A-Z])", "", name)
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).upper() or "ARG"


_CONSTEXPR = re.compile(r"\bconstexpr\s+(?:unsigned\s+int|unsigned|int|uint32_t|int32_t|size_t|auto)\s+"
                        r"([A-Za-z_]\w*)\s*=\s*(\d+)([uU]?)\s*;")
_UNROLL = re.compile(r"#\s*pragma\s+unroll\s+(\d+)\b")


def _kernel_body_sites(lp: LaunchPath, kernel: Func, kargs, add) -> None:
    refs = [i for f in [lp.entry, *lp.functions] for i, t in enumerate(f.tokens) if t.text == kernel.name]
    if kernel.template_close >= 0 and len([k for k in kargs if k[1] is kernel]) < len(refs):
        lp.notes.append(f"{kernel.name} is named without its template arguments on the launch path: "
                        "its body's constants are left alone")
        return
    body_at = lp.text.index("{", kernel.tokens[0].start) if "{" in lp.text[kernel.start:kernel.end] else kernel.end
    body = lp.text[body_at:kernel.end]
    for m in _CONSTEXPR.finditer(body):
        name, value = m.group(1), int(m.group(2))
        used = re.search(rf"\bfor\s*\([^;]*;[^;]*\b{name}\b|#\s*pragma\s+unroll\s*\(?\s*{name}\b", body)
        if used and value > 1:
            at = body_at + m.start(2)
            add("constexpr", _knob_name(name), value, [(at, at + len(m.group(2)) + len(m.group(3)))],
                "unsigned" if m.group(3) else "", f"constexpr {name} = {value} in {kernel.name} (loop bound)",
                kernel.name)
    for m in _UNROLL.finditer(body):
        if int(m.group(1)) > 1:
            at = body_at + m.start(1)
            add("unroll", "UNROLL", int(m.group(1)), [(at, at + len(m.group(1)))], "",
                f"#pragma unroll {m.group(1)} in {kernel.name} (line {lp.text.count(chr(10), 0, at) + 1})",
                kernel.name)
