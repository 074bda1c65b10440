"""Fused MoE's config space: the block sizes and launch options SGLang's config files set per batch size.

A config is what `fused_moe_kernel` takes through its `**config` splat (BLOCK_SIZE_M/N/K, GROUP_SIZE_M) plus
Triton's num_warps and num_stages; SGLang's default config leaves the last two to Triton (None here). The
kernel has no split-K.

`SGLANG_VALUES` is the grid SGLang's own tuning script searches (benchmark/kernels/fused_moe_triton/
common_utils.py, get_configs_compute_bound: 4 x 5 x 4 x 3 x 2 x 4 = 1,920 configs on CUDA); `VALUES` adds the
default config's BLOCK_SIZE_K 32 and GROUP_SIZE_M 8 (3,200). Of what Triton 3.6 adds to a launch, `maxnreg`
(ptxas's register cap per thread: more blocks per SM for register-bound tiles) applies to fused_moe_kernel: it is
a Triton option, so SGLang's `**config` splat passes it to the launch and its config files can hold it
(`MAXNREG`: the wide space's values). `num_ctas` > 1 (Hopper thread-block clusters) does not: it pays through
TMA multicast, and this kernel gathers A's rows through pointers. `launch_pdl` needs the kernel to wait on
its predecessor (gdc_wait), which SGLang's kernel does not: a source change, not a config.
"""
from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass, fields, replace

from astra_sglang.errors import AstraError

VALUES = {
    "block_m": (16, 32, 64, 128, 256),
    "block_n": (32, 64, 128, 256),
    "block_k": (32, 64, 128, 256),
    "group_m": (1, 8, 16, 32, 64),
    "warps": (4, 8),
    "stages": (2, 3, 4, 5),
}
SGLANG_VALUES = {
    "block_m": (16, 32, 64, 128, 256),
    "block_n": (32, 64, 128, 256),
    "block_k": (64, 128, 256),
    "group_m": (1, 16, 32, 64),
    "warps": (4, 8),
    "stages": (2, 3, 4, 5),
}
MAXNREG = (None, 128)
SGLANG_KEYS = {"block_m": "BLOCK_SIZE_M", "block_n": "BLOCK_SIZE_N", "block_k": "BLOCK_SIZE_K",
               "group_m": "GROUP_SIZE_M", "warps": "num_warps", "stages": "num_stages", "maxnreg": "maxnreg"}
TRITON_DEFAULTS = {"warps": 4, "stages": 3}
"""What Triton launches with where a config leaves num_warps / num_stages out (CUDA)."""
SMEM_BYTES = 227 * 1024
"""Shared memory a block may opt into on an H100/H200; the tuner reads the real GPU's where it has one."""
WGMMA_ROWS = 64
"""A warpgroup's rows: Triton runs a Hopper dot tile of BLOCK_SIZE_M this large or more on wgmma (MMA v3)."""
HOPPER = ("H100", "H200", "H800", "H20")
"""GPU names (parts of torch.cuda.get_device_name) of the Hopper parts, where Triton runs wgmma."""
_CODE = re.compile(r"^m(\d+)n(\d+)k(\d+)g(\d+)w(\d+|d)s(\d+|d)(?:r(\d+))?$")


@dataclass(frozen=True, order=True)
class MoeConfig:
    block_m: int
    block_n: int
    block_k: int
    group_m: int
    warps: int | None = None
    stages: int | None = None
    maxnreg: int | None = None
    """Triton's register cap per thread (None: ptxas chooses)."""

    @classmethod
    def from_sglang(cls, config: dict) -> "MoeConfig":
        """From a config dict as SGLang's files and default config hold it (other keys, e.g. USE_TMA of a
        down-projection file, are not part of this space)."""
        try:
            return cls(*(int(config[SGLANG_KEYS[f]]) for f in ("block_m", "block_n", "block_k", "group_m")),
                       warps=config.get("num_warps"), stages=config.get("num_stages"), maxnreg=config.get("maxnreg"))
        except (KeyError, TypeError, ValueError) as exc:
            raise AstraError(f"not a fused MoE config: {config!r} ({exc})") from None

    def sglang(self) -> dict[str, int]:
        """The dict SGLang's files hold and `override_config` takes (launch options left out where unset)."""
        return {SGLANG_KEYS[f.name]: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    def code(self) -> str:
        """A compact name, e.g. m64n64k32g8wdsd (d: Triton's default), usable in a Python identifier."""
        w = "d" if self.warps is None else self.warps
        s = "d" if self.stages is None else self.stages
        r = f"r{self.maxnreg}" if self.maxnreg else ""
        return f"m{self.block_m}n{self.block_n}k{self.block_k}g{self.group_m}w{w}s{s}{r}"

    @classmethod
    def from_code(cls, text: str) -> "MoeConfig":
        m = _CODE.match(text)
        if not m:
            raise AstraError(f"not a fused MoE config code: {text!r} (e.g. m64n64k32g8w4s3)")
        w, s = (None if v == "d" else int(v) for v in m.group(5, 6))
        return cls(*map(int, m.group(1, 2, 3, 4)), warps=w, stages=s, maxnreg=int(m.group(7)) if m.group(7) else None)

    def smem_bytes(self, element: int = 2, wgmma: bool = False) -> int:
        """Shared memory of the software pipeline: the A and B tiles of `stages - 1` stages, or of every stage
        where Triton feeds Hopper's wgmma (`wgmma`: an sm_90 GPU, and BLOCK_SIZE_M of a warpgroup's 64 rows or
        more), whose asynchronous reads of one stage's buffers overlap the next stage's loads. Below 64 rows the
        kernel runs mma.sync: SGLang ships bf16 configs tuned on an H100 (227 KiB a block) whose every-stage tiles
        would take 288 KiB (m16n128k256 with 4 stages, E=16 N=2048), and they run. At 64 rows and more the GPU
        refuses at load what every stage's tiles do not fit: on an H200 (2026-11-27, commit 45b7284, Mixtral's
        experts at batch 64) all 184 of SGLang's space's configs that failed with OutOfResources were those,
        each 'Required' exactly `stages` x the tiles, and none of the 57 with fewer rows over that size failed."""
        stages = self.stages or TRITON_DEFAULTS["stages"]
        buffers = stages if wgmma and self.block_m >= WGMMA_ROWS else max(stages - 1, 1)
        return buffers * (self.block_m * self.block_k + self.block_k * self.block_n) * element


def grid(values: dict = SGLANG_VALUES, maxnreg: tuple = (None,)) -> list[MoeConfig]:
    """Every config of a grid of values (no filtering): SGLang's tuning space by default."""
    return [MoeConfig(*v, maxnreg=r) for v in itertools.product(*values.values()) for r in maxnreg]


SPACES = {"sglang": lambda: grid(), "wide": lambda: grid(VALUES, MAXNREG)}
"""Named spaces: SGLang's tuning grid (1,920), and with the default config's values and maxnreg 128 (6,400)."""


def fits(config: MoeConfig, smem: int = SMEM_BYTES, wgmma: bool = False) -> bool:
    return config.smem_bytes(wgmma=wgmma) <= smem


def hopper(gpu: str) -> bool:
    """Whether a GPU of this name (torch.cuda.get_device_name) is a Hopper part."""
    return any(h in gpu for h in HOPPER)


def rows_per_expert(tokens: int, experts: int, topk: int) -> int:
    return max(1, math.ceil(tokens * topk / experts))


def useful(config: MoeConfig, tokens: int, experts: int, topk: int) -> bool:
    """A block of rows no larger than 4x the rows an expert gets on average (rounded up to a power of two):
    larger M blocks compute padding rows only. SGLang's shipped files keep to this at every batch size."""
    limit = max(16, 4 * 2 ** math.ceil(math.log2(rows_per_expert(tokens, experts, topk))))
    return config.block_m <= limit


def space(tokens: int, experts: int, topk: int, smem: int = SMEM_BYTES) -> list[MoeConfig]:
    """Every config of VALUES that fits in shared memory and is useful at this batch size."""
    out = []
    for values in itertools.product(*VALUES.values()):
        config = MoeConfig(*values)
        if fits(config, smem) and useful(config, tokens, experts, topk):
            out.append(config)
    return out


def neighbors(config: MoeConfig, smem: int = SMEM_BYTES) -> list[MoeConfig]:
    """Configs one step away along one knob (the next value up or down), that fit."""
    out = []
    for name, values in VALUES.items():
        current = getattr(config, name)
        if current is None:
            current = TRITON_DEFAULTS[name]
        if current not in values:
            continue
        i = values.index(current)
        for j in (i - 1, i + 1):
            if 0 <= j < len(values):
                other = replace(config, **{name: values[j]})
                if other.warps is None or other.stages is None:  # spell out Triton's defaults once moved
                    other = replace(other, warps=other.warps or TRITON_DEFAULTS["warps"],
                                    stages=other.stages or TRITON_DEFAULTS["stages"])
                if fits(other, smem):
                    out.append(other)
    return out
