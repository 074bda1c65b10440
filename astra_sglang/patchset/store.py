"""The patch set on disk: `<root>/<op>/{manifest.json, kernel.cu}`; list, enable/disable, build.

By default the set is the package's shipped `patches/` with the user folder's `patches/` over it (a user
patch of the same op wins). A folder given (`--patches DIR` or ASTRA_SGLANG_PATCHES) is exactly that one
folder. ASTRA_SGLANG_PATCHES may also join several roots with os.pathsep, the later winning: that is how
`launch` hands the resolved set to the SGLang processes it spawns.

Nothing in the installed package is written: enabling or disabling a shipped patch writes an override into the
user folder (HOME/patch-state.json, `{"op": {"enabled": false}}`), which every store reads over the shipped
manifests, in the server's processes too (they inherit HOME).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Sequence

from astra_sglang.errors import AstraError
from astra_sglang.patchset.manifest import MANIFEST, PatchManifest, Target
from astra_sglang.paths import home_dir, patches_dir, user_patches_dir
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
    origin: str = ""
    """Where the patch comes from: "shipped", "user" (HOME/patches) or its root folder."""
    shadows: str = ""
    """The origin of a patch of the same op that this one replaces, if any."""
    overridden: bool = False
    """A shipped patch whose `enabled` the user folder's override sets (`patch enable/disable`)."""

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

    @property
    def label(self) -> str:
        """A short name of the patch: patches/OP (shipped), user:patches/OP (the user folder's) or its folder.
        Scripts that record the shipped patch's figures match "patches/": the user's never pass for it."""
        if self.origin == "shipped":
            return f"patches/{self.op}"
        return f"user:patches/{self.op}" if self.origin == "user" else str(self.folder)

    def describe(self) -> str:
        """Which patch this is, in words: shipped, the user folder's (over the shipped one), or a folder's."""
        what = {"shipped": "the shipped patch", "user": f"the user folder's patch {self.folder}"}.get(
            self.origin, f"the patch in {self.folder}")
        return what + (f", over the {self.shadows} one" if self.shadows in ("shipped", "user") else
                       f", over the one in {self.shadows}" if self.shadows else "")

    def speedup_geomean(self) -> float | None:
        """Over the measured shapes as a patched server serves them: a shape the manifest's `defer` leaves to
        SGLang's op counts 1.0x (the evaluator's rule for a declined shape)."""
        defer = self.manifest.defer if self.manifest.kind == "cuda" else None
        values = [1.0 if defer is not None and defer.defers(self.spec, tuple(m.shape), m.dtype) else m.speedup
                  for m in self.manifest.measured if m.speedup > 0]
        if not values:
            return None
        product = 1.0
        for v in values:
            product *= v
        return product ** (1 / len(values))


def default_roots() -> list[Path]:
    """$ASTRA_SGLANG_PATCHES (its folders, the later winning), else the shipped patches/ and, where it exists,
    the user folder's patches/ over them."""
    env = [Path(p) for p in os.environ.get(ENV_PATCHES, "").split(os.pathsep) if p]
    if env:
        return env
    user = user_patches_dir()
    return [patches_dir(), user] if user.is_dir() else [patches_dir()]


STATE_FILE = "patch-state.json"


def state_path() -> Path:
    """The user folder's overrides of shipped manifests."""
    return home_dir() / STATE_FILE


def _overrides() -> dict[str, dict]:
    path = state_path()
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except ValueError as exc:
        raise AstraError(f"{path}: not JSON ({exc}); remove it to return to the shipped manifests") from None
    return {op: v for op, v in data.items() if isinstance(v, dict)} if isinstance(data, dict) else {}


def _override(op: str, enabled: bool) -> None:
    state = _overrides()
    state[op] = {**state.get(op, {}), "enabled": enabled}
    path = state_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_name(path.name + ".new")
    scratch.write_text(json.dumps(state, indent=1, sort_keys=True) + "\n")
    scratch.replace(path)


def origin_of(root: Path) -> str:
    resolved = root.resolve()
    if resolved == patches_dir().resolve():
        return "shipped"
    if resolved == user_patches_dir().resolve():
        return "user"
    return str(root)


class PatchStore:
    def __init__(self, root: str | Path | Sequence[str | Path] | None = None, builder: Builder | None = None):
        if root is None or (isinstance(root, (list, tuple)) and not root):
            self.roots = default_roots()
        elif isinstance(root, (list, tuple)):
            self.roots = [Path(r) for r in root]
        else:
            self.roots = [Path(root)]
        self._builder = builder

    @property
    def root(self) -> Path:
        """The winning root (the user folder's by default)."""
        return self.roots[-1]

    def describe(self) -> str:
        return " + ".join(str(r) for r in self.roots)

    def entries(self) -> list[PatchEntry]:
        missing = [r for r in self.roots if not r.is_dir()]
        if missing:
            raise AstraError(f"patch folder not found: {missing[0]}")
        found: dict[str, PatchEntry] = {}
        for root in self.roots:
            for manifest in sorted(root.glob(f"*/{MANIFEST}")):
                entry = self._load(manifest.parent, origin_of(root))
                below = found.get(entry.op)
                found[entry.op] = replace(entry, shadows=below.origin) if below else entry
        return [found[op] for op in sorted(found)]

    def enabled(self) -> list[PatchEntry]:
        return [e for e in self.entries() if e.enabled]

    def layers(self, op: str) -> list[PatchEntry]:
        """Every root's patch of `op`, the winning one first (the user folder's over the shipped one), each
        naming the one below it. The one lookup of "the patch for OP": `get`, `bench`'s default candidate and
        the tuner's start kernel all read it, so they agree with what `launch` serves."""
        holders = [r for r in reversed(self.roots) if (r / op / MANIFEST).is_file()]
        entries = [self._load(r / op, origin_of(r)) for r in holders]
        return [replace(e, shadows=below.origin) for e, below in zip(entries, entries[1:])] + entries[-1:]

    def find(self, op: str) -> PatchEntry | None:
        """The winning patch of `op`, None where no root has one."""
        found = self.layers(op)
        return found[0] if found else None

    def get(self, op: str) -> PatchEntry:
        """The winning patch of `op` (the last root that has it); AstraError naming the set where none has."""
        entry = self.find(op)
        if entry is None:
            known = ", ".join(e.op for e in self.entries()) or "none"
            raise AstraError(f"no patch {op!r} in {self.describe()} (patches: {known})")
        return entry

    def set_enabled(self, op: str, enabled: bool) -> PatchEntry:
        """Enables or disables the winning patch (the one a server would load): a shipped one through the user
        folder's override, any other in its own manifest."""
        entry = self.get(op)
        manifest = entry.manifest.model_copy(update={"enabled": enabled, **({"off_reason": ""} if enabled else {})})
        if entry.origin == "shipped":
            _override(op, enabled)
            return replace(entry, manifest=manifest, overridden=True)
        manifest.save(entry.folder)
        return replace(entry, manifest=manifest)

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

    def _load(self, folder: Path, origin: str = "") -> PatchEntry:
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
        override = _overrides().get(manifest.op, {}) if origin == "shipped" else {}
        if "enabled" in override:
            on = bool(override["enabled"])
            manifest = manifest.model_copy(update={"enabled": on, **({"off_reason": ""} if on else {})})
        return PatchEntry(manifest.op, folder, manifest, spec, origin, overridden="enabled" in override)
