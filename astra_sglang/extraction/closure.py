"""The transitive closure of a kernel: which source units to copy and which system headers to include.

Three passes to a fixpoint (DESIGN.md): (1) AST references of every unit taken, every candidate of an
OVERLOADED_DECL_REF included; (2) macros named by tokens inside a unit's range (macro bodies scanned too,
so macros used in other macros come along); (3) an identifier-token fallback by name -- the only way to
catch explicit / partial specializations (the AST points at the primary template: without them the
output still compiles but computes differently), `__launch_bounds__` arguments and `#if`'d-out code.
"""
from __future__ import annotations

import re
from pathlib import Path

from clang import cindex
from clang.cindex import CursorKind

from astra_sglang.errors import AstraError
from astra_sglang.extraction import hostcode
from astra_sglang.extraction.records import Closure, Unit
from astra_sglang.extraction.units import Parsed

_USING = {"USING_DIRECTIVE", "USING_DECLARATION", "NAMESPACE_ALIAS"}
_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"]+)[>"]', re.M)


def qualified(unit: Unit) -> str:
    return "::".join([n or "(anonymous)" for n, _ in unit.namespaces] + [unit.name])


def global_functions(parsed: Parsed, path: Path | None = None) -> list[Unit]:
    """Units that are __global__ functions (a CUDAGLOBAL_ATTR child), optionally only in `path`."""
    out = []
    for unit, curs in parsed.cursors.items():
        if unit.kind in ("FUNCTION_DECL", "FUNCTION_TEMPLATE") and (path is None or unit.file == path):
            if any(ch.kind == CursorKind.CUDAGLOBAL_ATTR for c in curs for ch in c.get_children()):
                out.append(unit)
    return out


def find_units(parsed: Parsed, name: str) -> list[Unit]:
    """Units whose qualified name ends with `name` ("flashinfer::norm::RMSNorm", "RMSNorm")."""
    parts = name.split("::")
    out = []
    for u in parsed.units:
        if u.is_macro or u.name != parts[-1]:
            continue
        spaces = [n for n, _ in u.namespaces if n]  # anonymous namespaces are invisible in names
        if len(parts) == 1 or spaces[-(len(parts) - 1):] == parts[:-1]:
            out.append(u)
    return out


class _Builder:
    def __init__(self, parsed: Parsed):
        self.p = parsed
        self.by_name: dict[str, list[Unit]] = {}
        self.macros: dict[str, list[Unit]] = {}
        for u in parsed.units:
            (self.macros if u.is_macro else self.by_name).setdefault(u.name, []).append(u)
        self.members: dict[str, list[Unit]] = {}  # out-of-line members, by the USR of their class
        for u, curs in parsed.cursors.items():
            parent = curs[0].semantic_parent
            if parent is not None and parent.kind in (CursorKind.CLASS_DECL, CursorKind.STRUCT_DECL,
                                                      CursorKind.CLASS_TEMPLATE, CursorKind.UNION_DECL,
                                                      CursorKind.CLASS_TEMPLATE_PARTIAL_SPECIALIZATION):
                self.members.setdefault(parent.get_usr(), []).append(u)
        self.taken: set[Unit] = set()
        self.system_files: set[Path] = set()
        # Host-only functions: followed only when something kept calls them (hostcode.py).
        self.host_fns = {u for u, curs in parsed.cursors.items()
                         if all(hostcode.is_host_only(c, parsed.texts[u.file].text) for c in curs)}
        self.host_side: set[Unit] = set()
        self.dropped: dict[str, tuple[Unit, int, int, cindex.Cursor]] = {}  # by USR: members cut out
        self.referenced: set[str] = set()

    def _unit_of(self, cur: cindex.Cursor) -> Unit | None:
        loc = cur.location
        if loc.file is None:
            return None
        path = Path(loc.file.name).resolve()
        unit = self.p.unit_at(path, loc.offset)
        if unit is None and path not in self.p.by_file:
            self.system_files.add(path)
        return unit

    def _walk(self, cur: cindex.Cursor, skip: set[str]):
        """Preorder, minus the subtrees of members being dropped."""
        yield cur
        for ch in cur.get_children():
            if ch.kind in hostcode.FUNCTIONS and ch.get_usr() in skip:
                continue
            yield from self._walk(ch, skip)

    def _refs(self, cur: cindex.Cursor, skip: set[str] = frozenset()):
        """(referenced cursor, is an overload candidate) of every node under `cur`."""
        for node in self._walk(cur, skip):
            ref = node.referenced
            if node.kind == CursorKind.OVERLOADED_DECL_REF:
                lib = cindex.conf.lib  # the bindings register these calls but wrap no method
                for i in range(lib.clang_getNumOverloadedDecls(node)):
                    yield lib.clang_getOverloadedDecl(node, i), True
            elif ref is not None and ref != node:
                yield ref, False
                definition = ref.get_definition()
                if definition is not None and definition != ref:
                    yield definition, False
            if node.kind in (CursorKind.CLASS_DECL, CursorKind.STRUCT_DECL, CursorKind.CLASS_TEMPLATE):
                yield from ((c, False) for u in self.members.get(node.get_usr(), []) for c in self.p.cursors[u]
                            if u not in self.host_fns)  # out-of-line host members: only when called

    def _by_token(self, tokens: list[str], host_side: bool) -> list[Unit]:
        """The name fallback. From device-side code a name never calls a host-only function (a host
        function of the same name would drag in its host library), so those are skipped there."""
        out = []
        for tok in tokens:
            for u in self.macros.get(tok, []) + self.by_name.get(tok, []):
                if u not in self.taken and (host_side or u not in self.host_fns):
                    out.append(u)
        return out

    def _follow(self, cur: cindex.Cursor, skip: set[str], host_side: bool) -> list[Unit]:
        deps = []
        for ref, candidate in self._refs(cur, skip):
            usr = ref.get_usr()
            if usr:
                self.referenced.add(usr)
                if usr in self.dropped:  # a kept caller needs a member we were cutting out: keep it
                    unit, start, end, member = self.dropped.pop(usr)
                    deps += self._follow(member, set(), True)
                    deps += self._by_token(self.p.texts[unit.file].tokens(start, end), True)
            dep = self._unit_of(ref)
            # A dependent `a == b` in device code lists every operator== in scope, host ones included.
            if dep is not None and dep not in self.taken and (host_side or not candidate or dep not in self.host_fns):
                deps.append(dep)
        return deps

    def run(self, roots: list[Unit], extra_tokens: list[str]) -> list[Unit]:
        self.host_side = {u for u in roots if u in self.host_fns}
        work = list(roots) + self._by_token(extra_tokens, True)  # the launcher is host code
        while work:
            unit = work.pop()
            if unit in self.taken:
                continue
            self.taken.add(unit)
            host_side = unit in self.host_side or unit in self.host_fns
            ft = self.p.texts[unit.file]
            drops: list[tuple[int, int]] = []
            skip: set[str] = set()
            if not unit.is_macro and not host_side:
                for cur in self.p.cursors[unit]:
                    for start, end, member in hostcode.droppable_members(cur, ft.text, cur.location.file.name):
                        usr = member.get_usr()
                        if usr and usr not in self.referenced:
                            self.dropped[usr] = (unit, start, end, member)
                            skip.add(usr)
                            drops.append((start, end))
            tokens = [t for a, b in hostcode.cut(ft.text, unit.start, unit.end, drops) for t in ft.tokens(a, b)]
            if not unit.is_macro:
                for cur in self.p.cursors[unit]:
                    work += self._follow(cur, skip, host_side)
            work += self._by_token(tokens, host_side)
            if not work:  # using-declarations only count once what they name is in
                work = [u for u in self._usings() if u not in self.taken]
        return sorted(self.taken, key=lambda u: u.order)

    def drops(self) -> list[tuple[Path, int, int, str]]:
        return sorted((u.file, a, b, m.spelling) for u, a, b, m in self.dropped.values() if u in self.taken)

    def _usings(self) -> list[Unit]:
        names = {u.name for u in self.taken} | {n for u in self.taken for n, _ in u.namespaces}
        out = []
        for u, curs in self.p.cursors.items():
            if u.kind in _USING and u not in self.taken:
                targets = {r.spelling for c in curs for r in c.walk_preorder() if r.kind in (
                    CursorKind.NAMESPACE_REF, CursorKind.TYPE_REF, CursorKind.TEMPLATE_REF, CursorKind.OVERLOADED_DECL_REF)}
                if targets & names:
                    out.append(u)
        return out


def compute(parsed: Parsed, roots: list[Unit], extra_tokens: list[str], stub_dir: Path | None = None) -> Closure:
    """Files outside `parsed.project` are system headers: they stay includes (nvcc finds them itself)."""
    builder = _Builder(parsed)
    units = builder.run(roots, extra_tokens)
    _check_diagnostics(parsed, units, builder.drops())
    _system_macro_files(parsed, units, builder)
    includes = _includes(parsed, builder.system_files, stub_dir)
    files = sorted({u.file for u in units})
    ignored = [_fmt(d) for d in parsed.tu.diagnostics if d.severity >= cindex.Diagnostic.Error]
    return Closure(units=units, includes=includes, files=files, kernels=[qualified(u) for u in roots],
                   ignored_diagnostics=ignored[:50], parse_seconds=parsed.seconds, dropped=builder.drops())


def _system_macro_files(parsed: Parsed, units: list[Unit], builder: _Builder) -> None:
    """Tokens of the closure naming macros defined in system headers make those headers needed."""
    wanted = {t for u in units for t in parsed.texts[u.file].tokens(u.start, u.end)} - set(builder.macros)
    for cur in parsed.tu.cursor.get_children():
        if cur.kind == CursorKind.MACRO_DEFINITION and cur.spelling in wanted and cur.location.file is not None:
            path = Path(cur.location.file.name).resolve()
            if path not in parsed.by_file and not path.name.startswith("__clang"):
                builder.system_files.add(path)


def _fmt(diag: cindex.Diagnostic) -> str:
    loc = diag.location
    where = f"{Path(loc.file.name).name}:{loc.line}:{loc.column}" if loc.file else "<command line>"
    return f"{where}: {diag.spelling}"


def _check_diagnostics(parsed: Parsed, units: list[Unit], drops: list[tuple[Path, int, int, str]]) -> None:
    """Errors inside what we copy are fatal; errors elsewhere (torch-only host code) are only recorded."""
    fatal = []
    for diag in parsed.tu.diagnostics:
        if diag.severity < cindex.Diagnostic.Error:
            continue
        loc = diag.location
        if loc.file is None:
            fatal.append(diag)
            continue
        path = Path(loc.file.name).resolve()
        if any(f == path and a <= loc.offset < b for f, a, b, _ in drops):
            continue  # inside a host-only member that is cut out
        if any(u.file == path and u.start <= loc.offset < u.end for u in units):
            fatal.append(diag)
    if fatal:
        raise AstraError("parse errors in the kernel's code: " + "; ".join(_fmt(d) for d in fatal[:3]))


def _includes(parsed: Parsed, needed: set[Path], stub_dir: Path | None) -> list[str]:
    """The `#include` lines, as the source spells them, that bring in the needed system files.

    Each needed file is attributed to the first directive (in translation-unit order) of a source file that
    reaches it, so only headers something in the closure uses are kept (a blanket list pulls in cublasLt.h).
    """
    children: dict[Path, set[Path]] = {}
    edges: dict[tuple[Path, int], Path] = {}
    by_suffix: dict[str, Path] = {}
    for inc in parsed.tu.get_includes():
        if inc.source is None:
            continue
        child, parent = Path(inc.include.name).resolve(), Path(inc.source.name).resolve()
        children.setdefault(parent, set()).add(child)
        edges[(parent, inc.location.line)] = child
        by_suffix.setdefault(inc.include.name, child)

    def reach(start: Path) -> set[Path]:
        seen, stack = set(), [start]
        while stack:
            f = stack.pop()
            if f not in seen:
                seen.add(f)
                stack.extend(children.get(f, ()))
        return seen & needed

    # Stubs stand in for torch headers: what they include is what the kernel really used from them.
    stubs = {p for p in children if stub_dir is not None and p.is_relative_to(stub_dir.resolve())}
    sources = {path: ft.text for path, ft in parsed.texts.items()} | {p: p.read_text() for p in stubs}
    directives: list[tuple[tuple[int, ...], str, Path]] = []
    for path, text in sources.items():
        for m in _INCLUDE.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            target = edges.get((path, line))
            if target is None:  # skipped by an include guard: find the file by name (system headers only)
                if m.group(1) == '"':
                    continue
                target = next((p for n, p in by_suffix.items() if n.endswith("/" + m.group(2))), None)
            if target is None or target in parsed.by_file or target in stubs or any(
                    target.is_relative_to(r) for r in parsed.project):
                continue
            directives.append((parsed.order_of.get(path, (1 << 30,)) + (m.start(),), m.group(2), target))
    out: list[str] = []
    covered: set[Path] = set()
    for _, spelled, target in sorted(directives):
        new = reach(target) - covered
        if new and spelled not in out:
            out.append(spelled)
            covered |= new
    return out
