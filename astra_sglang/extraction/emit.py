"""Write the extraction: kernel.cu (closure + generated C-ABI launcher), spec.toml, provenance.json.

kernel.cu compiles with plain `nvcc -std=c++20 -arch=sm_90 -shared -Xcompiler -fPIC -I harness_templates`:
every -D the parse used is baked in at the top (top-level `#if`s were resolved under them), system headers
stay includes, and source units are re-wrapped in their original namespaces in translation-unit order.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from pathlib import Path

import jinja2

from astra_sglang.errors import AstraError
from astra_sglang.extraction import hostcode
from astra_sglang.extraction.records import ClangEnv, Closure, SourceRoot
from astra_sglang.paths import templates_dir
from astra_sglang.specs.records import KernelSpec, SourceLocation

ABI_DTYPE = {"float32": "ASTRA_FLOAT32", "float16": "ASTRA_FLOAT16", "bfloat16": "ASTRA_BFLOAT16"}


def launcher_template(kind: str, op: str) -> Path:
    return templates_dir() / "launchers" / f"{kind}_{op}.cu.j2"


def render_launcher(spec: KernelSpec, kind: str, loc: SourceLocation) -> str:
    path = launcher_template(kind, spec.name)
    if not path.is_file():
        raise AstraError(f"no launcher template for {spec.name} from {kind}: expected {path}")
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(path.parent)), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True)
    return env.get_template(path.name).render(spec=spec, kernel=loc.kernel, host_entry=loc.host_entry,
                                              abi_dtype=ABI_DTYPE)


def baked_defines(source: SourceRoot) -> list[tuple[str, str]]:
    """(-D name, value) pairs the parse used that nvcc would not define itself."""
    out = []
    for flag in source.defines:
        name, _, value = flag.removeprefix("-D").partition("=")
        out.append((name, value or "1"))
    return out


def _open_close(cur: tuple, new: tuple) -> str:
    common = 0
    while common < min(len(cur), len(new)) and cur[common] == new[common]:
        common += 1
    text = "".join(f"}}  // namespace {name}\n".rstrip() + "\n" for name, _ in reversed(cur[common:]))
    for name, inline in new[common:]:
        text += f"{'inline ' if inline else ''}namespace {name} {{\n".replace("namespace  {", "namespace {")
    return text


def render_closure(closure: Closure, texts: dict[Path, str]) -> str:
    """The units in translation-unit order, each back inside its namespaces (macros wherever they fall)."""
    return "".join(text for text, _, _ in closure_pieces(closure, texts))


def closure_pieces(closure: Closure, texts: dict[Path, str]) -> list[tuple[str, Path | None, int]]:
    """(text, original file, its first line) of every piece of the closure; generated text has no file.

    Host-only members nothing calls are cut out of their classes (hostcode.py), and `#if`s that a unit's
    range cuts through are balanced, so the pieces compile on their own."""
    out: list[tuple[str, Path | None, int]] = []
    current: tuple = ()
    drops: dict[Path, list[tuple[int, int, str]]] = {}
    for path, start, end, name in closure.dropped:
        drops.setdefault(path, []).append((start, end, name))
    for unit in closure.units:
        text = texts[unit.file]
        if unit.is_macro:
            out.append(("#define " + text[unit.start:unit.end] + "\n", unit.file, text.count("\n", 0, unit.start) + 1))
            continue
        if unit.namespaces != current:
            out.append((_open_close(current, unit.namespaces), None, 0))
            current = unit.namespaces
        cuts = [(a, b, n) for a, b, n in drops.get(unit.file, []) if unit.start <= a and b <= unit.end]
        pos = unit.start
        for a, b, name in sorted(cuts) + [(unit.end, unit.end, "")]:
            out.append((hostcode.balance_conditionals(text[pos:a]), unit.file, text.count("\n", 0, pos) + 1))
            if name:
                out.append((f"/* astra-sglang: host-only {name}() cut out, unused by the kernel */", None, 0))
            pos = b
        out.append(("\n", None, 0))
    out.append((_open_close(current, ()), None, 0))
    return out


def line_map(pieces: list[tuple[str, Path | None, int]], first_line: int, source: SourceRoot) -> list[list]:
    """[kernel.cu line, line count, original file (relative), original line] for each copied piece."""
    out, line = [], first_line
    for text, path, orig in pieces:
        count = text.count("\n") + 1
        if path is not None and text.strip():
            out.append([line, count, _rel(path, source), orig])
        line += text.count("\n")
    return out


def kernel_source(spec: KernelSpec, source: SourceRoot, loc: SourceLocation, closure: Closure,
                  texts: dict[Path, str], launcher: str) -> tuple[str, list[list]]:
    """kernel.cu's text and its line map (line_map())."""
    origin = f"{source.kind} {source.version or source.commit or ''}".strip()
    head = [f"// Extracted by astra-sglang from {origin}: {loc.path} ({loc.kernel}) for op {spec.name}.",
            "// Third-party code under its own license: keep it out of version control.",
            "// Configuration the closure was taken under (top-level #if's are resolved for it):"]
    for name, value in baked_defines(source):
        head += [f"#ifndef {name}", f"#define {name} {value}", "#endif"]
    head.append('#include "astra_abi.h"')
    head += [f"#include <{inc}>" for inc in closure.includes]
    pieces = closure_pieces(closure, texts)
    prefix = "\n".join(head) + "\n\n"
    body = "".join(text for text, _, _ in pieces)
    return (prefix + body + "\n// ---- generated launcher ----\n" + launcher,
            line_map(pieces, prefix.count("\n") + 1, source))


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_outputs(out_dir: Path, spec: KernelSpec, spec_text: str, source: SourceRoot, loc: SourceLocation,
                  env: ClangEnv, closure: Closure, kernel_text: str, seconds: float, lines: list[list] | None = None,
                  launcher_name: str = "") -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "kernel.cu").write_text(kernel_text)
    (out_dir / "spec.toml").write_text(spec_text)
    main = (source.root / loc.path).resolve()
    files = sorted({main, *closure.files})
    provenance = {
        "kernel": spec.name,
        "source": {"kind": source.kind, "root": str(source.root), "origin": source.origin,
                   "version": source.version, "git_commit": source.commit, "path": loc.path,
                   "kernel": loc.kernel, "host_entry": loc.host_entry},
        "files": {_rel(f, source): _sha256(f) for f in files},
        "kernels": closure.kernels,
        "units": len(closure.units),
        "lines": kernel_text.count("\n"),
        "includes": closure.includes,
        "clang_args": list(env.args),
        "libclang": "libclang 18.1.1 (PyPI)",
        "clang_resource_dir": str(env.resource_dir),
        "cuda": {"home": str(env.cuda_home), "version": ".".join(map(str, env.cuda_version))},
        "baked_defines": [f"{n}={v}" for n, v in baked_defines(source)],
        "parse_only_defines": list(env.parse_only_defines),
        "stub_headers": list(source.stub_headers),
        "upstream_compile_flags": list(source.upstream_flags),
        "launcher_template": launcher_name or launcher_template(source.kind, spec.name).name,
        "dropped_host_members": sorted({f"{_rel(f, source)}: {name}" for f, _, _, name in closure.dropped}),
        "line_map": lines or [],
        "ignored_diagnostics": closure.ignored_diagnostics,
        "extracted_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "extraction_seconds": round(seconds, 3),
        "parse_seconds": round(closure.parse_seconds, 3),
    }
    (out_dir / "provenance.json").write_text(json.dumps(provenance, indent=2) + "\n")
    return out_dir / "kernel.cu"


def _rel(path: Path, source: SourceRoot) -> str:
    for root in (source.root, *source.include_dirs):
        if path.is_relative_to(root.resolve()):
            return str(path.relative_to(root.resolve()))
    return re.sub(r"^/+", "", str(path))
