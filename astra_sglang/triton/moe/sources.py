"""Where variants of SGLang's fused_moe_kernel come from, and how they are loaded: the kernel-source provider.

A variant is a module file defining `fused_moe_kernel`, a `@triton.jit` function that takes SGLang's kernel
parameters (splitk.PARAMS) and `stride_ck`, `SPLIT_K` (splitk.ADDED) by name; splitk_launch launches it. Two
kinds, both files in `<cache>/triton-sources/` named by what they are valid for:
- "splitk": generated from the installed SGLang source by the split-K transform (`splitk-v<V>-<SGLang source
  hash>.py`), regenerated wherever it is missing: the cache holds third-party code, git never does;
- "agent-<hash>": text someone else wrote (an LLM agent), registered here after a check of its interface
  (`agent-<text hash>.py`); a candidate names it by that name (source_op).
"""
from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from astra_sglang.errors import AstraError
from astra_sglang.paths import cache_dir
from astra_sglang.triton.moe import splitk

FOLDER = "triton-sources"
SPLITK = "splitk"
AGENT = "agent-"


@dataclass(frozen=True)
class VariantSource:
    """One variant module on disk and what it is valid for."""

    name: str
    """"splitk" or "agent-<text hash>"."""
    path: Path
    base_hash: str
    """The hash of SGLang's kernel source it was generated from (splitk), or "" (an agent's own text)."""

    @property
    def text_hash(self) -> str:
        return _hash(self.path.read_text())


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def folder(root: Path | None = None) -> Path:
    path = Path(root or cache_dir()) / FOLDER
    path.mkdir(parents=True, exist_ok=True)
    return path


def _write(path: Path, text: str) -> None:
    """Whole or not at all: several processes (server workers, evaluation children) may write the same file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def installed_kernel_file() -> Path:
    from astra_sglang.triton.moe.configs import package_dir

    return package_dir() / splitk.KERNEL_FILE


def sglang_version() -> str:
    from astra_sglang.extraction.sources import _version
    from astra_sglang.triton.moe.configs import package_dir

    return _version(package_dir(), "sglang")


def splitk_source(kernel_file: Path | None = None, root: Path | None = None) -> VariantSource:
    """The split-K variant of the installed kernel (or of `kernel_file`), generated once per source hash.
    SourceMismatch where the source is not what the transform expects."""
    source = splitk.read(kernel_file or installed_kernel_file())
    path = folder(root) / f"{SPLITK}-v{splitk.VERSION}-{source.source_hash}.py"
    if not path.is_file():
        _write(path, splitk.render(source, splitk.transform(source), "" if kernel_file else sglang_version()))
    return VariantSource(SPLITK, path, source.source_hash)


def check_text(text: str) -> None:
    """A variant's interface, read with `ast`: it parses and defines a `@triton.jit` fused_moe_kernel whose
    parameters include every name the launcher passes (extra ones need defaults). AstraError naming the cause."""
    try:
        tree = ast.parse(text)
    except SyntaxError as exc:
        raise AstraError(f"the variant is not Python: line {exc.lineno}: {exc.msg}") from None
    found = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == splitk.KERNEL]
    if not found:
        raise AstraError(f"the variant defines no top-level {splitk.KERNEL}")
    fn = found[0]
    if not any(ast.unparse(d).split("(")[0].endswith("jit") for d in fn.decorator_list):
        raise AstraError(f"the variant's {splitk.KERNEL} is not decorated with @triton.jit")
    names = [a.arg for a in fn.args.args + fn.args.kwonlyargs]
    missing = [p for p in (*splitk.PARAMS, *splitk.ADDED) if p not in names]
    if missing:
        raise AstraError(f"the variant's {splitk.KERNEL} lacks parameters the launcher passes: {', '.join(missing)}")
    extra = [p for p in names if p not in (*splitk.PARAMS, *splitk.ADDED)]
    defaults = {a.arg for a, _ in zip(reversed(fn.args.args), reversed(fn.args.defaults))}
    defaults |= {a.arg for a, d in zip(fn.args.kwonlyargs, fn.args.kw_defaults) if d is not None}
    if [p for p in extra if p not in defaults]:
        raise AstraError(f"the variant's extra parameters need defaults: {', '.join(p for p in extra if p not in defaults)}")


def register(text: str, root: Path | None = None) -> VariantSource:
    """An agent-written variant: checked (check_text), written under its text hash; returns its handle, whose
    name a candidate uses (source_op.candidate_path)."""
    check_text(text)
    name = AGENT + _hash(text)
    path = folder(root) / f"{name}.py"
    if not path.is_file():
        _write(path, text)
    return VariantSource(name, path, "")


def by_name(name: str, root: Path | None = None) -> VariantSource:
    """The variant a candidate or a patch names: "splitk" (regenerated where missing) or a registered agent's."""
    if name == SPLITK:
        return splitk_source(root=root)
    path = folder(root) / f"{name}.py"
    if not name.startswith(AGENT) or not path.is_file():
        raise AstraError(f"no Triton variant {name!r}: {SPLITK!r}, or an agent's registered in {folder(root)}")
    return VariantSource(name, path, "")


@functools.cache
def load(path: Path) -> ModuleType:
    """The variant module, imported from its file once per process (Triton reads the kernel's source back
    from the file, so it must be a real one)."""
    name = "astra_sglang_variant_" + Path(path).stem.replace("-", "_")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - anything a variant's module code raises is its failure
        del sys.modules[name]
        raise AstraError(f"cannot load the Triton variant {path}: {type(exc).__name__}: {exc}") from None
    return module


def kernel(source: VariantSource):
    """The variant's `fused_moe_kernel` (a Triton JITFunction)."""
    return load(source.path).fused_moe_kernel
