"""In-process patching: load the enabled patches, build their kernels, rebind every SGLang target.

One Runtime per process (`ensure`), shared by the three entry points: `install` (direct, in this
process), the import hook (patches a target module right after it executes) and the SGLang plugin
(registers AROUND hooks). Configuration travels to spawned workers through environment variables.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from astra_sglang.errors import AstraError
from astra_sglang.extraction.static_targets import package_installed
from astra_sglang.patching.stats import ENV_STATS_DIR, StatsWriter
from astra_sglang.patching.targets import rebind, resolve
from astra_sglang.patchset.store import ENV_PATCHES, PatchEntry, PatchStore

log = logging.getLogger("astra_sglang.patching")

ENV_VERIFY_RATE = "ASTRA_SGLANG_VERIFY_RATE"
ENV_MECHANISM = "ASTRA_SGLANG_MECHANISM"
ENV_TARGET_MODULES = "ASTRA_SGLANG_TARGET_MODULES"
"""Comma-separated target modules, precomputed by `launch` so the import hook starts without pydantic."""

LauncherFactory = Callable[[PatchEntry, PatchStore], Callable]
"""(patch, store) -> launcher: (tensors, scalars) -> ABI code."""


@dataclass(frozen=True)
class RuntimeConfig:
    patches: Path | tuple[Path, ...]
    """One patch folder, or several (the later winning: the shipped set, then the user's)."""
    verify_rate: float = 0.0
    stats_dir: Path | None = None
    mechanism: str = "direct"

    @classmethod
    def from_env(cls, environ: dict | None = None) -> "RuntimeConfig | None":
        env = os.environ if environ is None else environ
        if not env.get(ENV_PATCHES):
            return None
        try:
            rate = float(env.get(ENV_VERIFY_RATE) or 0.0)
        except ValueError:
            raise AstraError(f"{ENV_VERIFY_RATE} must be a number in [0, 1]") from None
        roots = tuple(Path(p) for p in env[ENV_PATCHES].split(os.pathsep) if p)
        return cls(roots[0] if len(roots) == 1 else roots, rate, Path(env[ENV_STATS_DIR]) if env.get(ENV_STATS_DIR) else None,
                   env.get(ENV_MECHANISM) or "direct")

    def to_env(self) -> dict[str, str]:
        roots = self.patches if isinstance(self.patches, tuple) else (self.patches,)
        env = {ENV_PATCHES: os.pathsep.join(map(str, roots)), ENV_VERIFY_RATE: repr(self.verify_rate), ENV_MECHANISM: self.mechanism}
        if self.stats_dir:
            env[ENV_STATS_DIR] = str(self.stats_dir)
        return env


def kernel_launcher(entry: PatchEntry, store: PatchStore) -> Callable:
    """The real launcher: build (cached) and load the patch's library, one ctypes Launcher per op."""
    from astra_sglang.harness.abi import KernelLibrary, Launcher

    library = KernelLibrary(store.build(entry))
    return Launcher(library, len(entry.spec.tensor_args), len(entry.spec.scalar_args))


_launcher_factory: LauncherFactory = kernel_launcher
_device_type = "cuda"


def set_launcher_factory(factory: LauncherFactory | None, device_type: str = "cuda") -> None:
    """Swap the kernel launcher, e.g. for a CPU stand-in (tests, dry runs). None restores the real one."""
    global _launcher_factory, _device_type
    _launcher_factory, _device_type = factory or kernel_launcher, device_type


class Runtime:
    def __init__(self, config: RuntimeConfig, store: PatchStore | None = None):
        if not 0.0 <= config.verify_rate <= 1.0:
            raise AstraError(f"verify rate must be in [0, 1], got {config.verify_rate}")
        self.config = config
        self.store = store or PatchStore(list(config.patches) if isinstance(config.patches, tuple) else config.patches)
        self.entries = self.store.enabled()
        self.stats = StatsWriter(config.stats_dir, config.mechanism)
        self.ops: dict[tuple[str, int], object] = {}
        self._launchers: dict[str, Callable] = {}
        self.patched: dict[str, str] = {}
        """"module:attr" -> op, for every name this process rebound."""

    def targets(self) -> list[tuple[PatchEntry, Target]]:
        return [(e, t) for e in self.entries for t in e.targets]

    def target_modules(self) -> set[str]:
        return {t.module for _, t in self.targets()}

    def op_for(self, entry: PatchEntry, original: Callable, target: Target | None = None):
        """One PatchedOp per (op, original object); its launcher is built once per op, eagerly, so the
        library is loaded before model init and CUDA-graph capture."""
        from astra_sglang.patching.patched_op import PatchedOp

        key = (entry.op, id(original))
        if key not in self.ops and entry.manifest.kind == "triton-config":  # config files: count lookups only
            from astra_sglang.patching.triton_config import ConfigLookup

            self.ops[key] = ConfigLookup(original, self.stats.op(entry.op), original.__module__)
        if key not in self.ops and entry.manifest.kind == "triton-launch":  # SGLang's kernel, tuned launch configs
            from astra_sglang.patching.triton_launch import LaunchPatch, kernel_of

            self.ops[key] = LaunchPatch(original, kernel_of(entry.op), entry.manifest.launches,
                                        self.stats.op(entry.op), target.module if target else "",
                                        target.attr if target else "")
        if key not in self.ops and entry.manifest.kind == "triton-source":  # SGLang's kernel's variant at its launcher
            from astra_sglang.patching.triton_source import SourcePatch, current_device

            self.ops[key] = SourcePatch(original, entry.folder, entry.manifest.variant, entry.manifest.configs,
                                        self.stats.op(entry.op), target.module if target else "",
                                        target.attr if target else "", device=current_device())
        if key not in self.ops:
            if entry.op not in self._launchers:
                self._launchers[entry.op] = _launcher_factory(entry, self.store)
            self.ops[key] = PatchedOp(entry.spec, self._launchers[entry.op], original, self.stats.op(entry.op),
                                      dtypes=entry.manifest.dtypes, verify_rate=self.config.verify_rate,
                                      device_type=_device_type, defer=entry.manifest.defer,
                                      max_bytes=entry.manifest.gate_max_bytes)
        return self.ops[key]

    def original_of(self, entry: PatchEntry, target: Target):
        """The live object behind `target`, or None when its package is absent (the op cannot be called
        then). A missing module or attribute in an installed package raises: never a silent unpatched run."""
        if not package_installed(target.package):
            log.warning("astra-sglang: %s not installed: patch %s skips %s", target.package, entry.op, target)
            return None
        return resolve(target)

    def patch_target(self, entry: PatchEntry, target: Target) -> None:
        original = self.original_of(entry, target)
        if original is None or getattr(original, "__astra_op__", None) is not None:
            return  # absent, or already ours (idempotent across mechanisms)
        op = self.op_for(entry, original, target)
        names = rebind(target, original, op.fn)
        self._record(entry, names)

    def patch_module(self, module: str) -> None:
        """Import hook callback: patch every target that lives in `module`, just imported."""
        for entry, target in self.targets():
            if target.module == module:
                self.patch_target(entry, target)

    def install_all(self) -> None:
        for entry, target in self.targets():
            self.patch_target(entry, target)

    def _record(self, entry: PatchEntry, names: list[str]) -> None:
        op_stats = self.stats.op(entry.op)
        for name in names:
            self.patched[name] = entry.op
            if name not in op_stats.targets:
                op_stats.targets.append(name)
        log.info("astra-sglang: %s -> %s", entry.op, ", ".join(names))
        self.stats.start()
        self.stats.write()


_current: Runtime | None = None


def current() -> Runtime | None:
    return _current


def ensure(config: RuntimeConfig) -> Runtime:
    """This process's Runtime, created on first use."""
    global _current
    if _current is None:
        _current = Runtime(config)
    return _current


def install(patch_dir: str | Path | None = None, verify_rate: float = 0.0, stats_dir: str | Path | None = None,
            *, mechanism: str = "direct") -> Runtime:
    """Patch this process now: every enabled patch's targets must resolve (AstraError otherwise)."""
    store = PatchStore(patch_dir)
    runtime = ensure(RuntimeConfig(tuple(store.roots) if len(store.roots) > 1 else store.root, verify_rate, Path(stats_dir) if stats_dir else None, mechanism))
    runtime.install_all()
    return runtime


def reset() -> None:
    """Forget this process's Runtime (tests). Rebound names stay rebound."""
    global _current
    _current = None
