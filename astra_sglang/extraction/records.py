"""Typed records passed between the extraction stages."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class SourceRoot:
    """One located source of kernels: an installed/unpacked package or an SGLang checkout."""

    kind: str
    """sglang (JIT csrc in the sglang package), flashinfer (its shipped headers) or sgl-kernel (AOT csrc)."""
    root: Path
    """Paths in a spec's [sources.<kind>] table are relative to this folder."""
    origin: str
    """What the user named (a package, a path) -- for messages and provenance."""
    version: str = ""
    commit: str = ""
    include_dirs: tuple[Path, ...] = ()
    """-I folders the source's own build uses; declarations found under them are copied, not included."""
    defines: tuple[str, ...] = ()
    """-D flags the source's own build passes (baked into kernel.cu)."""
    std: str = "c++17"
    stub_headers: tuple[str, ...] = ()
    """Headers replaced by empty stubs for parsing (unused by the kernel, or torch-only)."""
    upstream_flags: tuple[str, ...] = ()
    """The nvcc flags the upstream build uses for this code (recorded in provenance)."""


@dataclass(frozen=True)
class ClangEnv:
    """A working libclang configuration for CUDA built from registry packages and the local CUDA toolkit."""

    resource_dir: Path
    cuda_home: Path
    cuda_version: tuple[int, int]
    stub_dir: Path
    args: tuple[str, ...]
    """Every argument handed to libclang, source-specific ones included."""
    parse_only_defines: tuple[str, ...]
    """-D flags that only emulate nvcc for clang (nvcc defines them itself): not baked into kernel.cu."""


@dataclass(frozen=True)
class Unit:
    """One top-level declaration (or macro definition) of the source, as a byte range of its file."""

    file: Path
    start: int
    end: int
    kind: str
    name: str
    namespaces: tuple[tuple[str, bool], ...]
    """Enclosing namespaces outermost first, as (name, is_inline); "" is an anonymous namespace."""
    order: tuple[int, ...]
    """Position in the preprocessed translation unit (include offsets, then offset): emission order."""

    @property
    def is_macro(self) -> bool:
        return self.kind == "MACRO_DEFINITION"


@dataclass
class Closure:
    """What the kernel needs: source units to copy, system headers to include, files read."""

    units: list[Unit]
    includes: list[str]
    files: list[Path]
    kernels: list[str]
    """Fully qualified names of the __global__ functions taken."""
    ignored_diagnostics: list[str] = field(default_factory=list)
    """Parse errors outside the closure (e.g. torch-only host code): harmless, recorded."""
    parse_seconds: float = 0.0
    dropped: list[tuple[Path, int, int, str]] = field(default_factory=list)
    """Host-only members cut out of kept classes: (file, start, end, name); nothing kept calls them."""
