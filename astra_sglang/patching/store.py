"""The patch set on disk: `<root>/<op>/{manifest.json, kernel.cu}`; list, enable/disable, build.

The root is the package's shipped `patches/` unless a folder is given (`--patches DIR` or the
ASTRA_SGLANG_PATCHES environment variable, which is also how spawned SGLang workers find it).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from astra_sglang.errors import AstraError
from astra_sglang.patching.manifest import MANIFEST, PatchManifest
from astra_sglang.patching.targets import Target
from astra_sglang.paths import patches_dir
from astra_sglang.specs.records import KernelSpec
from astra_sglang.specs.registry import get_spec

ENV_PATCHES = "ASTRA_SGLANG_PATCHES"

# build_library(source, defines, arch) -> BuildInfo; injectable so tests and CPU dry runs need no nvcc.
Builder = Callable[..., object]


@dataclass(frozen=True)
class PatchEntry:
    op: str
    folder: Path
    manifest: PatchManifest
    spec: KernelSpec

    @property
    def enabled(self) -> bool:
        return self.manifest.enabled

    @property
    def kernel_path(self) -> Path:
        return self.folder / self.manifest.kernel

    @property
    def targets(self) -> list[Target]:
        """The manifest's own targets, else the spec's sglang_targets."""
        names = self.manifest.targets or [f"{t.module}:{t.attr}" for t in self.spec.sglang_targets]
        return [Target.parse(n) for n in names]

    def speedup_geomean(self) -> float | None:
        values = [m.speedup for m in self.manifest.measured if m.speedup > 0]
        if not values:
            return None
        product = 1.0
        for v in values:
            product *= v
        return product ** (1 / len(values))


def default_root() -> Path:
    return Path(os.environ.get(ENV_PATCHES) or patches_dir())


class PatchStore:
    def __init__(self, root: str | Path | None = None, builder: Builder | None = None):
        self.root = Path(root) if root else default_root()
        self._builder = builder

    def entries(self) -> list[PatchEntry]:
        if not self.root.is_dir():
            raise AstraError(f"patch folder not found: {self.root}")
        return [self._load(p.parent) for p in sorted(self.root.glob(f"*/{MANIFEST}"))]

    def enabled(self) -> list[PatchEntry]:
        return [e for e in self.entries() if e.enabled]

    def get(self, op: str) -> PatchEntry:
        folder = self.root / op
        if not (folder / MANIFEST).is_file():
            known = ", ".join(e.op for e in self.entries()) or "none"
            raise AstraError(f"no patch {op!r} in {self.root} (patches: {known})")
        return self._load(folder)

    def set_enabled(self, op: str, enabled: bool) -> PatchEntry:
        entry = self.get(op)
        manifest = entry.manifest.model_copy(update={"enabled": enabled})
        manifest.save(entry.folder)
        return PatchEntry(entry.op, entry.folder, manifest, entry.spec)

    def build(self, entry: PatchEntry, arch: str | None = None) -> Path:
        """The kernel library for `entry` (cached by the builder); AstraError with the log tail on failure."""
        if not entry.kernel_path.is_file():
            raise AstraError(f"patch {entry.op}: kernel source missing: {entry.kernel_path}")
        builder = self._builder
        if builder is None:
            from astra_sglang.harness.build import build_library as builder
        info = builder(entry.kernel_path, dict(entry.manifest.defines), arch)
        if not getattr(info, "ok", False):
            tail = (getattr(info, "log", "") or "").strip().splitlines()[-1:] or ["no log"]
            raise AstraError(f"patch {entry.op}: kernel build failed: {tail[0]}")
        return Path(info.library)

    def _load(self, folder: Path) -> PatchEntry:
        try:
            manifest = PatchManifest.load(folder)
        except Exception as exc:  # a broken manifest names itself
            raise AstraError(f"invalid patch manifest {folder / MANIFEST}: {str(exc).splitlines()[0]}") from exc
        if manifest.op != folder.name:
            raise AstraError(f"patch folder {folder.name!r} holds a manifest for op {manifest.op!r}")
        spec = get_spec(manifest.op)
        unknown = [d for d in manifest.dtypes if d not in spec.dtypes]
        if unknown:
            raise AstraError(f"patch {manifest.op}: dtypes {unknown} not in the spec's {spec.dtypes}")
        stray = [d for d in (manifest.defer.dtypes if manifest.defer else []) if d not in manifest.dtypes]
        if stray:
            raise AstraError(f"patch {manifest.op}: defer dtypes {stray} not in the patch's {manifest.dtypes}")
        return PatchEntry(manifest.op, folder, manifest, spec)
