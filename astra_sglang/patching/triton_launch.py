"""Launch patches (manifest kind "triton-launch"): tuned launch configs for SGLang's own Triton attention.

The patch replaces no code. Its target is the kernel global SGLang's launcher launches
(`decode_attention:_fwd_grouped_kernel_stage1`, `extend_attention:_fwd_kernel`); the patch layer rebinds it to
a `ConfiguredKernel` (astra_sglang.triton.attention.launch) that takes each launch, finds the manifest's table for
the call's attention shape (q heads, kv heads, head dim, dtype) and the nearest key (decode: batch size;
extend: longest extend length), and launches SGLang's kernel with that config, or with SGLang's own where the
table keeps SGLang's pick, the shape is another, or the key is beyond twice the largest measured.
Engagement: every launch counted, a tuned config's as a kernel call, the others as fallbacks. CUDA-graph
replays do not pass through Python: a decode graph counts once, at capture, with the config it holds.
`patch disable` leaves SGLang's kernel global alone at the next launch; `restore` puts it back in-process.
"""
from __future__ import annotations

from astra_sglang.errors import AstraError
from astra_sglang.patching.bound import BoundPatch
from astra_sglang.patching.stats import OpStats
from astra_sglang.patchset.manifest import LaunchTable
from astra_sglang.triton.attention.launch import ConfiguredKernel, LaunchInfo
from astra_sglang.triton.attention.space import AttnConfig

KIND = "triton-launch"


class LaunchChoice:
    """The tables of one patch, looked up per launch (a dict per attention shape, keys sorted once)."""

    def __init__(self, tables: list[LaunchTable]):
        self.tables: dict[tuple, tuple[list[int], dict[int, AttnConfig | None], int]] = {}
        for t in tables:
            configs = {k: AttnConfig.from_code(t.kernel, c) if c else None for k, c in t.configs.items()}
            if not configs:
                raise AstraError(f"triton-launch table of {t.kernel} at {t.heads}/{t.kv_heads}x{t.head_dim} is empty")
            self.tables[(t.kernel, t.heads, t.kv_heads, t.head_dim, t.dtype)] = (sorted(configs), configs, t.max_key)

    def __call__(self, info: LaunchInfo) -> AttnConfig | None:
        found = self.tables.get((info.kernel, info.heads, info.kv_heads, info.head_dim, info.dtype))
        if found is None:
            return None
        keys, configs, max_key = found
        if info.size > 2 * max_key:
            return None
        return configs[min(keys, key=lambda k: (abs(k - info.size), k))]


class LaunchPatch(BoundPatch):
    """One patched kernel global: `fn` is what the patch layer binds in its place."""

    def __init__(self, original, kernel: str, tables: list[LaunchTable], stats: OpStats, module: str, attr: str):
        super().__init__(original, stats, module, attr)
        self.fn = ConfiguredKernel(original, kernel, LaunchChoice([t for t in tables if t.kernel == kernel]),
                                   self.count)
        self.fn.__astra_op__ = self


def kernel_of(op: str) -> str:
    """The attention target a launch patch's op names (its spec name)."""
    from astra_sglang.triton.attention.space import KERNELS

    if op not in KERNELS:
        raise AstraError(f"a triton-launch patch is for {' or '.join(KERNELS)}, not {op!r}")
    return op
