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

from astra_sglang.extraction.knobtokens import (Func, Tok, args_of, definition, evaluate, expr_after, file_tokens,
                                                functions, int_literal, match, parse)

WARP = 32


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


def launch_path(path: Path, text: str) -> LaunchPath:
    tu = parse(path, text)
    tokens = file_tokens(tu, path, text)
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


def _block_exprs(f: Func) -> list[list[Tok]]:
    toks, out = f.tokens, []
    for i, t in enumerate(toks):
        if t.text == "<<<":
            args = args_of(toks, i, match(toks, i, "<<<", ">>>"))
            if len(args) > 1:
                out.append(args[1])
        elif t.text == "blockDim" and i and toks[i - 1].text in (".", "->") and i + 1 < len(toks) \
                and toks[i + 1].text == "=":
            out.append(expr_after(toks, i + 2))
        elif t.text in ("cudaLaunchKernel", "cudaLaunchCooperativeKernel") and i + 1 < len(toks) \
                and toks[i + 1].text == "(":
            args = args_of(toks, i + 1, match(toks, i + 1, "(", ")"))
            if len(args) > 2:
                out.append(args[2])
    return out


def _kernel_template_args(path_funcs: list[Func], kernels: list[Func]) -> list[tuple[Func, Func, int, list]]:
    """(path function, kernel, index of the kernel's name token, its template argument token lists)."""
    names = {k.name: k for k in kernels}
    out = []
    for f in path_funcs:
        for i, t in enumerate(f.tokens[:-1]):
            if t.text in names and f.tokens[i + 1].text == "<":
                close = match(f.tokens, i + 1, "<", ">")
                out.append((f, names[t.text], i, args_of(f.tokens, i + 1, close)))
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
            if any(int_literal(t) for t in expr):
                lp.notes.append(f"{f.name} (line {line(expr[0])}): a literal written into the launch itself is "
                                "left alone (the grid is usually computed from the same number again)")
            seen, work = set(), [t.text for t in expr if t.kind == "IDENTIFIER"]
            while work:
                name = work.pop()
                if name in seen:
                    continue
                seen.add(name)
                init = definition(f, name)
                for j, t in enumerate(init):
                    if t.kind == "IDENTIFIER":
                        work.append(t.text)
                    lit = int_literal(t)
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
            lit = int_literal(arg[0]) if len(arg) == 1 else None
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
    value = evaluate(tu, init[j])
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


def _template_param_names(tu, kernel: Func) -> list[str]:
    toks = kernel.tokens
    if kernel.template_close < 0:
        return []
    close = next(i for i, t in enumerate(toks) if t.start == kernel.template_close)
    return [next((t.text for t in reversed([a for a in arg if a.text != "="] if "=" not in [a.text for a in arg]
                                           else arg[:[a.text for a in arg].index("=")])
                  if t.kind == "IDENTIFIER"), "") for arg in args_of(toks, 1, close)]


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
