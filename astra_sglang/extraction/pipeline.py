"""One extraction end to end: spec -> source -> libclang parse -> closure -> kernel.cu + spec.toml + provenance."""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from astra_sglang.errors import AstraError
from astra_sglang.extraction import clang_env, closure, emit, sources, units
from astra_sglang.extraction import launcher as generic
from astra_sglang.extraction.records import ClangEnv, Closure, SourceRoot
from astra_sglang.paths import extract_dir, specs_dir
from astra_sglang.specs.registry import get_spec


@dataclass(frozen=True)
class Extraction:
    kernel_cu: Path
    out_dir: Path
    source_kind: str
    version: str
    units: int
    lines: int
    seconds: float


def extract(kernel: str, source: str | None = None, out_dir: Path | None = None, check: bool = False) -> Extraction:
    """`check`: compile kernel.cu with nvcc (cached, as the harness builds it) and fail naming the original
    file behind the first error; the outputs stay written for inspection."""
    start = time.perf_counter()
    spec = get_spec(kernel)
    if not spec.sources:
        raise AstraError(f"spec {kernel!r} names no sources to extract from")
    root = sources.locate(list(spec.sources), source)
    loc = spec.sources[root.kind]
    main = (root.root / loc.path).resolve()
    if not main.is_file():
        raise AstraError(f"source not found: {loc.path} is not in {root.root} ({root.kind} {root.version})".rstrip())
    env = clang_env.make_env(root)
    template = emit.launcher_template(root.kind, spec.name)
    forced = (loc.model_extra or {}).get("launcher") == "generic"
    if template.is_file() and not forced:
        launcher = emit.render_launcher(spec, root.kind, loc)
        extra = [name for _, name in units.identifiers(launcher)]
        parsed, result = take_closure(main, root, env, loc.kernel, loc.host_entry, extra, loc.path)
        launcher_name = template.name
    else:  # no per-(source, op) template: derive one from the source's host entry
        parsed = parse_source(main, root, env)
        entry = generic.find_entry(parsed, loc.kernel, loc.host_entry)
        try:
            launcher = generic.render(spec, root.kind, generic.derive(spec, entry), emit.ABI_DTYPE)
        except AstraError as exc:
            raise AstraError(f"no launcher for {spec.name} from {root.kind}: no template {template.name}, "
                             f"and {exc}") from exc
        extra = [name for _, name in units.identifiers(launcher)]
        result = closure_of(parsed, main, loc.kernel, entry.name, extra, loc.path, env.stub_dir)
        launcher_name = f"{generic.TEMPLATE} (host entry {entry.name})"
    texts = {p: ft.text for p, ft in parsed.texts.items()}
    text, lines = emit.kernel_source(spec, root, loc, result, texts, launcher)
    out = Path(out_dir) if out_dir else extract_dir(kernel, root.kind)
    spec_text = (specs_dir() / f"{kernel}.toml").read_text() if (specs_dir() / f"{kernel}.toml").is_file() else ""
    seconds = time.perf_counter() - start
    path = emit.write_outputs(out, spec, spec_text, root, loc, env, result, text, seconds, lines, launcher_name)
    if check:
        compile_check(path)
    return Extraction(path, out, root.kind, root.version or root.commit, len(result.units), text.count("\n"), seconds)


def take_closure(main: Path, root: SourceRoot, env: ClangEnv, kernel: str, host_entry: str = "",
                 extra_tokens: list[str] | None = None, label: str = "") -> tuple[units.Parsed, Closure]:
    """Parse `main` and take the closure of `kernel` (+ `host_entry` and names the launcher uses)."""
    parsed = parse_source(main, root, env)
    return parsed, closure_of(parsed, main, kernel, host_entry, extra_tokens, label, env.stub_dir)


def parse_source(main: Path, root: SourceRoot, env: ClangEnv) -> units.Parsed:
    tu = units.parse(main, env)
    project = [p.resolve() for p in (root.root, *root.include_dirs)]
    return units.cut_units(tu, project, main)


def closure_of(parsed: units.Parsed, main: Path, kernel: str, host_entry: str = "",
               extra_tokens: list[str] | None = None, label: str = "", stub_dir: Path | None = None) -> Closure:
    roots = [u for u in closure.global_functions(parsed, main) if u.name == kernel]
    if not roots:
        roots = [u for u in closure.global_functions(parsed) if u.name == kernel]
    if not roots:
        _kernel_missing(parsed, main, kernel)
    if host_entry:
        entry = closure.find_units(parsed, host_entry)
        if not entry:
            raise AstraError(f"host entry {host_entry!r} not found in {label or main.name}")
        roots += entry
    return closure.compute(parsed, roots, extra_tokens or [], stub_dir)


def _kernel_missing(parsed: units.Parsed, main: Path, name: str) -> None:
    here = sorted({u.name for u in closure.global_functions(parsed, main)})
    errors = [closure._fmt(d) for d in parsed.tu.diagnostics if d.severity >= 3][:3]
    hint = f"; parse errors: {'; '.join(errors)}" if errors and not here else ""
    raise AstraError(f"kernel {name!r} not found in {main.name}; __global__ functions there: "
                     f"{', '.join(here) or 'none'}{hint}")


def compile_check(kernel_cu: Path) -> None:
    """nvcc must accept the extracted file; else an error naming the original file and line that broke it."""
    from astra_sglang.harness import linemap
    from astra_sglang.harness.build import build_library

    info = build_library(kernel_cu)
    if info.ok:
        return
    where = linemap.explain(info.log, linemap.load(kernel_cu), limit=1)
    first = where[0] if where else next((ln for ln in info.log.splitlines() if "error" in ln), info.log[-300:])
    raise AstraError(f"extracted {kernel_cu} does not compile: {first}")
