"""Config patches (manifest kind "triton-config"): tuned config files for SGLang's own Triton kernels.

A fused MoE patch replaces no code: it holds config files in SGLang's layout
(`configs/triton_<version>/E=..,N=..,device_name=...json`). `launch` builds one folder that SGLang reads instead
of its own (`$SGLANG_MOE_CONFIG_DIR`, inherited by every process SGLang spawns): every config file SGLang would
read (links to its own folder's, or to the user's folder already named by the variable), with the patches'
files over them. A down-projection file (`..._down.json`) for a tuned expert shape is left out there, so that
both GEMMs take the tuned config, as the tuner measured them (SGLang reuses the up-projection config then).
Engagement: SGLang's `get_moe_configs` is wrapped where the patch layer rebinds names; every lookup is
counted, those answered by a patch's file as kernel calls, the others as fallbacks. `patch disable fused_moe`
leaves the variable unset: SGLang reads its own files again.
"""
from __future__ import annotations

import functools
import inspect
import os
import shutil
import sys
from pathlib import Path
from typing import Callable

from astra_sglang.errors import AstraError
from astra_sglang.patching.stats import OpStats
from astra_sglang.patchset.store import PatchEntry
from astra_sglang.triton.moe.configs import CONFIG_MODULE, ENV, package_dir, resolve

KIND = "triton-config"
FOLDER = "moe-configs"
"""The folder `launch` builds inside its stats folder."""


def base_dir(environ: dict | None = None) -> Path:
    """The folder SGLang would read configs from without the patch: the user's $SGLANG_MOE_CONFIG_DIR, else
    SGLang's own (found without importing sglang)."""
    env = os.environ if environ is None else environ
    return Path(env.get(ENV) or (package_dir() / CONFIG_MODULE).parent)


def _link(src: Path, dst: Path) -> None:
    try:
        dst.symlink_to(src)
    except OSError:  # a filesystem without links
        shutil.copyfile(src, dst)


def build_config_dir(entries: list[PatchEntry], out: Path, base: Path) -> Path:
    """`out` with `configs/<every version folder of base>` linked, the entries' files copied over them (a
    triton-source patch's without its knob keys) and the down-projection files of their expert shapes left out.
    Returns `out`, the value for $SGLANG_MOE_CONFIG_DIR."""
    if out.exists():
        shutil.rmtree(out)
    root = out / "configs"
    for folder in sorted((base / "configs").glob("triton_*")):
        (root / folder.name).mkdir(parents=True, exist_ok=True)
        for path in sorted(folder.iterdir()):
            if path.is_file():
                _link(path.resolve(), root / folder.name / path.name)
    for entry in entries:
        for config in entry.manifest.configs:
            src = entry.folder / config.path
            if not src.is_file():
                raise AstraError(f"patch {entry.op}: config file missing: {src}")
            dst = out / config.path
            dst.parent.mkdir(parents=True, exist_ok=True)
            if dst.is_symlink() or dst.exists():
                dst.unlink()
            if entry.manifest.kind == "triton-source":  # its entries' knob keys are for its launcher, not SGLang
                from astra_sglang.patching.triton_source import write_stripped

                write_stripped(src, dst)
            else:
                shutil.copyfile(src, dst)
            down = dst.name.removesuffix(".json") + "_down.json"
            for folder in root.glob("triton_*"):
                if (folder / down).is_symlink() or (folder / down).exists():
                    (folder / down).unlink()
    return out


def is_ours(path: Path | None) -> bool:
    """A file of the built folder that a patch put there (a copy), not one linked from SGLang's or the user's."""
    return path is not None and path.is_file() and not path.is_symlink()


class ConfigLookup:
    """SGLang's get_moe_configs behind a counter: the same results, every up-projection lookup counted."""

    def __init__(self, original: Callable, stats: OpStats, module: str):
        self.original, self.stats, self.module = original, stats, module
        self.signature = inspect.signature(original)
        self.fn = self._make_fn()

    def _make_fn(self) -> Callable:
        seen: dict[tuple, bool | None] = {}  # the call's arguments -> answered by a patch (None: a down lookup),
        # worked out once per distinct call

        @functools.wraps(self.original)
        def get_moe_configs(*args, **kwargs):
            key = (args, tuple(kwargs.items()))  # hashable: SGLang's own function is an lru_cache
            if key not in seen:  # binding costs ~6 us, and an eager prefill makes a lookup per layer
                bound = self.signature.bind(*args, **kwargs)
                bound.apply_defaults()
                seen[key] = None if bound.arguments.get("down_moe") else self.answered_by_patch(*bound.args)
            ours = seen[key]
            if ours is not None:
                self.stats.calls += 1
                if ours:
                    self.stats.kernel_calls += 1
                else:
                    self.stats.fallbacks += 1
            return self.original(*args, **kwargs)

        get_moe_configs.__astra_op__ = self
        for name in ("cache_clear", "cache_info"):  # SGLang's lru_cache interface stays usable
            if hasattr(self.original, name):
                setattr(get_moe_configs, name, getattr(self.original, name))
        return get_moe_configs

    def around(self, original: Callable, *args, **kwargs):
        """SGLang HookRegistry AROUND hook."""
        return self.fn(*args, **kwargs)

    def answered_by_patch(self, experts, inter, dtype, block_n=0, block_k=0, per_channel_quant=False,
                          down_moe=False) -> bool:
        import triton

        folder = os.environ.get(ENV)
        if not folder:
            return False
        name = sys.modules[self.module].get_config_file_name(experts, inter, dtype, [block_n, block_k],
                                                             per_channel_quant, down_moe=down_moe)
        return is_ours(resolve(Path(folder), name, triton.__version__))
