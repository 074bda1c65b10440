"""Fused MoE's config space: the block sizes and launch options SGLang's config files set per batch size.

A config is what `fused_moe_kernel` takes through its `**config` splat (BLOCK_SIZE_M/N/K, GROUP_SIZE_M) plus
Triton's num_warps and num_stages; SGLang's default config leaves the last two to Triton (None here). The
kernel has no split-K. The values are those SGLang's own tuning script searches, plus the default config's
(BLOCK_SIZE_K 32, GROUP_SIZE_M 8); configs that cannot fit in shared memory are dropped before any is run.
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
SGLANG_KEYS = {"block_m": "BLOCK_SIZE_M", "block_n": "BLOCK_SIZE_N", "block_k": "BLOCK_SIZE_K",
               "group_m": "GROUP_SIZE_M", "warps": "num_warps", "stages": "num_stages"}
TRITON_DEFAULTS = {"warps": 4, "stages": 3}
"""What Triton launches with where a config leaves num_warps / num_stages out (CUDA)."""
SMEM_BYTES = 227 * 1024
"""Shared memory a block may opt into on an H100/H200; the tuner reads the real GPU's where it has one."""
_CODE = re.compile(r"^m(\d+)n(\d+)k(\d+)g(\d+)w(\d+|d)s(\d+|d)$")


@dataclass(frozen=True, order=True)
class MoeConfig:
    block_m: int
    block_n: int
    block_k: int
    group_m: int
    warps: int | None = None
    stages: int | None = None

    @classmethod
    def from_sglang(cls, config: dict) -> "MoeConfig":
        """From a config dict as SGLang's files and default config hold it (other keys, e.g. USE_TMA of a
        down-projection file, are not part of this space)."""
        try:
            return cls(*(int(config[SGLANG_KEYS[f]]) for f in ("block_m", "block_n", "block_k", "group_m")),
                       warps=config.get("num_warps"), stages=config.get("num_stages"))
        except (KeyError, TypeError, ValueError) as exc:
            raise AstraError(f"not a fused MoE config: {config!r} ({exc})") from None

    def sglang(self) -> dict[str, int]:
        """The dict SGLang's files hold and `override_config` takes (launch options left out where unset)."""
        return {SGLANG_KEYS[f.name]: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    def code(self) -> str:
        """A compact name, e.g. m64n64k32g8wdsd (d: Triton's default), usable in a Python identifier."""
        w = "d" if self.warps is None else self.warps
        s = "d" if self.stages is None else self.stages
        return f"m{self.block_m}n{self.block_n}k{self.block_k}g{self.group_m}w{w}s{s}"

    @classmethod
    def from_code(cls, text: str) -> "MoeConfig":
        m = _CODE.match(text)
        if not m:
            raise AstraError(f"not a fused MoE config code: {text!r} (e.g. m64n64k32g8w4s3)")
        w, s = (None if v == "d" else int(v) for v in m.group(5, 6))
        return cls(*map(int, m.group(1, 2, 3, 4)), warps=w, stages=s)

    def smem_bytes(self, element: int = 2) -> int:
        """Shared memory of the software pipeline: one A and one B tile per stage."""
        stages = self.stages or TRITON_DEFAULTS["stages"]
        return stages * (self.block_m * self.block_k + self.block_k * self.block_n) * element


def fits(config: MoeConfig, smem: int = SMEM_BYTES) -> bool:
    return config.smem_bytes() <= smem


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
