"""Host code the kernel does not need: which functions are host-only, which members to drop, `#if` balance.

Host-heavy sources (SGLang JIT's tvm-ffi entries, sgl-kernel's torch checks) put host-only methods inside
the structs the kernel uses (e.g. a params struct with a `check_overflow()` that calls `CHECK_HOST`, which
needs tvm-ffi, dlpack and their `extern "C"` blocks). The closure does not follow such a member unless
something kept calls it, and the emitter cuts it out of the struct: the kernel's code stays the original,
the host library stays out, and the output still compiles with plain nvcc.
"""
from __future__ import annotations

import re

from clang import cindex
from clang.cindex import CursorKind

FUNCTIONS = (CursorKind.FUNCTION_DECL, CursorKind.FUNCTION_TEMPLATE, CursorKind.CXX_METHOD)
_DEVICE_ATTRS = (CursorKind.CUDADEVICE_ATTR, CursorKind.CUDAGLOBAL_ATTR)
CLASSES = (CursorKind.CLASS_DECL, CursorKind.STRUCT_DECL, CursorKind.CLASS_TEMPLATE, CursorKind.UNION_DECL,
            CursorKind.CLASS_TEMPLATE_PARTIAL_SPECIALIZATION)
_COND = re.compile(r"^[ \t]*#[ \t]*(if|ifdef|ifndef|elif|else|endif)\b", re.M)


def is_host_only(cur: cindex.Cursor, text: str) -> bool:
    """A function clang compiles for the host only: no __device__/__global__, not constexpr (usable on the
    device under --expt-relaxed-constexpr), not virtual (dropping it would change the class)."""
    if cur.kind not in FUNCTIONS:
        return False
    if any(ch.kind in _DEVICE_ATTRS for ch in cur.get_children()):
        return False
    if cur.kind == CursorKind.CXX_METHOD and cur.is_virtual_method():
        return False
    start, name_at = cur.extent.start.offset, cur.location.offset
    head = text[start:name_at] if cur.extent.start.file and 0 <= start <= name_at else ""
    return not re.search(r"\b(constexpr|consteval)\b", head)


def droppable_members(cur: cindex.Cursor, text: str, path_name: str) -> list[tuple[int, int, cindex.Cursor]]:
    """(start, end, cursor) of the host-only member functions defined inside class `cur` (nested classes
    too). Assignment operators stay (they decide triviality), as do members whose extent a macro hides."""
    out = []
    for ch in cur.get_children():
        if ch.kind in CLASSES:
            out += droppable_members(ch, text, path_name)
            continue
        if ch.kind not in (CursorKind.CXX_METHOD, CursorKind.FUNCTION_TEMPLATE) or ch.spelling.startswith("operator"):
            continue
        ext = ch.extent
        if ext.start.file is None or ext.end.file is None or ext.start.file.name != path_name \
                or ext.end.file.name != path_name or ext.start.offset > ch.location.offset:
            continue
        if not is_host_only(ch, text):
            continue
        start = _template_start(text, ext.start.offset)
        end = ext.end.offset
        m = re.compile(r"[ \t]*;").match(text, end)  # `void f() = delete;` / declarations keep their `;`
        out.append((start, m.end() if m else end, ch))
    return out


def _template_start(text: str, start: int) -> int:
    """Member templates: the extent may begin at the declarator; take `template <...>` with it."""
    m = re.search(r"template\s*<[^{};]*>\s*$", text[max(0, start - 400):start])
    return start - (len(text[max(0, start - 400):start]) - m.start()) if m else start


def cut(text: str, start: int, end: int, drops: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The pieces of [start, end) that remain once `drops` (sorted, inside it) are removed."""
    pieces, pos = [], start
    for a, b in sorted(drops):
        if a >= pos:
            pieces.append((pos, a))
            pos = b
    pieces.append((pos, end))
    return [(a, b) for a, b in pieces if b > a]


def balance_conditionals(text: str) -> str:
    """A unit's text cut from inside an `#if` (e.g. `extern "C" {` between `#ifdef __cplusplus` and its
    `#endif`): drop the stray `#endif`, drop a stray `#else` branch (the unit was parsed, so it sits in the
    taken branch) and close the `#if`s left open."""
    out, depth, skipping = [], 0, False
    lines = text.split("\n")
    for line in lines:
        m = _COND.match(line)
        word = m.group(1) if m else ""
        if skipping:
            if word.startswith("if"):
                depth += 1
            elif word == "endif":
                if depth == 0:
                    skipping = False
                else:
                    depth -= 1
            continue
        if word.startswith("if"):
            depth += 1
        elif word in ("else", "elif") and depth == 0:
            skipping = True
            continue
        elif word == "endif":
            if depth == 0:
                continue
            depth -= 1
        out.append(line)
    if depth:
        out.extend(["#endif  // closed by astra-sglang: the #if opened inside this declaration"] * depth)
    return "\n".join(out)
