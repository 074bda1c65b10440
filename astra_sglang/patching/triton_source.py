"""Source patches (manifest kind "triton-source"): a variant of SGLang's fused_moe_kernel served in the place of
its launcher, its knob values chosen per batch size from the patch's config files.

At load (`SourcePatch`) the variant is generated again from the installed SGLang source and its source hash
compared with the one the manifest recorded (`load_variant`): another source (SGLang upgraded, or patched by
hand) is refused, naming both, before any call is served; `launch` checks the same before the server starts.
The patch's `targets` name SGLang's launcher (`...fused_moe_triton_kernels:invoke_fused_moe_kernel`), which the
patch layer rebinds in every module that bound it. SGLang reads the patch's config files with the knob keys
left out (`$SGLANG_MOE_CONFIG_DIR`, built as for a triton-config patch), so SGLang and the launcher go by the same
batch-size key: the launcher takes the knobs of the key nearest the call's token count where the config SGLang
handed it is that key's (another file or an override keeps SGLang's launch). Engagement: every GEMM call is
counted, those the variant ran as kernel calls; a CUDA-graph replay does not pass through Python, so a decode
graph counts once, at capture.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from astra_sglang.errors import AstraError
from astra_sglang.patching.bound import BoundPatch
from astra_sglang.patching.stats import OpStats
from astra_sglang.patchset.manifest import ConfigFile, SourceVariant
from astra_sglang.triton.moe import configs as moe_configs
from astra_sglang.triton.moe import knobs, sources, splitk
from astra_sglang.triton.moe.space import MoeConfig
from astra_sglang.triton.moe.splitk_launch import GemmCall, SplitLauncher

KIND = "triton-source"


def load_variant(variant: SourceVariant, op: str = "fused_moe") -> sources.VariantSource:
    """The variant regenerated from the installed source, refused (AstraError) where that source is not the one
    the patch was measured on."""
    if variant.name != sources.SPLITK or variant.transform_version != splitk.VERSION:
        raise AstraError(f"patch {op}: source variant {variant.name} v{variant.transform_version} is not one this "
                         f"astra-sglang makes ({sources.SPLITK} v{splitk.VERSION}): re-tune it or disable it")
    handle = sources.splitk_source()
    if handle.base_hash != variant.source_hash:
        raise AstraError(f"patch {op}: measured on SGLang's {splitk.KERNEL} source {variant.source_hash}, the installed "
                         f"one is {handle.base_hash}: re-tune it or disable it (astra-sglang patch disable {op})")
    return handle


def write_stripped(src: Path, dst: Path) -> None:
    """A patch's config file as SGLang reads it: every entry without the knob keys."""
    table = moe_configs.read(src)
    dst.write_text(json.dumps({str(m): knobs.strip(c) for m, c in sorted(table.items())}, indent=4) + "\n")


class SourceChoice:
    """The knob values of a patch's config files, looked up per GEMM call (splitk_launch.Chooser)."""

    def __init__(self, folder: Path, files: list[ConfigFile]):
        self.tables: dict[tuple, tuple[str, dict[int, knobs.Variant]]] = {}
        for f in files:
            table = {m: knobs.Variant.from_file_entry(e) for m, e in moe_configs.read(folder / f.path).items()}
            if not table:
                raise AstraError(f"triton-source config file {f.path} is empty")
            self.tables[(f.experts, 2 * f.inter, f.hidden, f.dtype)] = ("up", table)
            self.tables[(f.experts, f.hidden, f.inter, f.dtype)] = ("down", table)

    def __call__(self, call: GemmCall) -> int:
        found = self.tables.get((call.experts, call.n, call.k, call.dtype))
        if found is None:
            return 1
        gemm, table = found
        variant = table[moe_configs.nearest(table, call.tokens)]
        try:
            given = MoeConfig.from_sglang(dict(call.config))
        except AstraError:
            return 1
        if given != variant.config:
            return 1
        return variant.split.up if gemm == "up" else variant.split.down


class SourcePatch(BoundPatch):
    """One patched launcher name: `fn` is what the patch layer binds in its place."""

    def __init__(self, original: Callable, folder: Path, variant: SourceVariant, files: list[ConfigFile],
                 stats: OpStats, module: str = "", attr: str = "", device: str | None = None):
        handle = load_variant(variant, stats.op)
        if device is not None:  # SGLang reads a GPU's own files only
            files = [f for f in files if f.device == device.replace(" ", "_")]
        super().__init__(original, stats, module, attr)
        self.fn = SplitLauncher(original, sources.kernel(handle), SourceChoice(folder, files), self.count)
        self.fn.__astra_op__ = self

    def around(self, original: Callable, *args, **kwargs):
        """SGLang HookRegistry AROUND hook."""
        return self.fn(*args, **kwargs)


def current_device() -> str | None:
    """This process's GPU name, None without one (then every file of the patch is read)."""
    import torch

    return torch.cuda.get_device_name() if torch.cuda.is_available() else None
