"""The launch configs of SGLang's Triton attention kernels: what each launcher hard-codes, as a search space.

decode (`_fwd_grouped_kernel_stage1`, launched by `_decode_grouped_att_m_fwd`): BLOCK_N (the launcher's
`BLOCK`), BLOCK_H, num_warps, num_stages. The kv-split count is not a launch knob: the triton backend
computes a per-request split count into a tensor before the launcher runs (bounded by the server's
--triton-attention-num-kv-splits, which also sizes its buffers at start-up), and the reduce kernel reads the
same tensor. It is a fixed dimension of a tuning run (`splits`), never changed per call.

extend (`_fwd_kernel`, launched by `extend_attention_fwd`): BLOCK_M, BLOCK_N (from SGLang's
`_get_block_sizes_for_extend_attention`), num_warps, num_stages (hard-coded 1).

A config that cannot run is filtered before any is timed, with its reason: shared memory over the GPU's
opt-in limit, or (decode) a BLOCK_H below tl.dot's 16 rows or beyond the heads one kv head serves.
"""
from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, replace

from astra_sglang.errors import AstraError

SMEM_BYTES = 227 * 1024
KERNELS = ("decode_attention", "extend_attention")
VALUES = {
    "decode_attention": {"block_h": (16, 32, 64), "block_n": (16, 32, 64, 128), "warps": (1, 2, 4, 8),
                         "stages": (1, 2, 3, 4)},
    "extend_attention": {"block_m": (16, 32, 64, 128), "block_n": (16, 32, 64, 128), "warps": (4, 8),
                         "stages": (1, 2, 3)},
}
LETTERS = {"block_m": "m", "block_h": "h", "block_n": "n", "warps": "w", "stages": "s"}
LAUNCH_NAMES = {"block_m": "BLOCK_M", "block_h": "BLOCK_H", "block_n": "BLOCK_N", "warps": "num_warps",
                "stages": "num_stages"}
"""The launch's keyword for each knob."""
_CODE = re.compile(r"([mhnws])(\d+)")


@dataclass(frozen=True, order=True)
class AttnConfig:
    """One launch config; `block_m` (extend) or `block_h` (decode) is 0 where the kernel has no such knob."""

    kernel: str
    block_n: int
    warps: int
    stages: int
    block_m: int = 0
    block_h: int = 0

    def knobs(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in VALUES[self.kernel]}

    def launch(self) -> dict[str, int]:
        """The launch keywords this config sets (what the patch and the op hand the kernel)."""
        return {LAUNCH_NAMES[k]: v for k, v in self.knobs().items()}

    def code(self) -> str:
        """e.g. h16n32w4s2 (decode), m128n64w8s1 (extend): usable in a Python identifier."""
        return "".join(f"{LETTERS[k]}{v}" for k, v in self.knobs().items())

    @classmethod
    def from_code(cls, kernel: str, text: str) -> "AttnConfig":
        if kernel not in VALUES:
            raise AstraError(f"no attention config space for {kernel!r}; known: {', '.join(KERNELS)}")
        found = {k: int(v) for k, v in _CODE.findall(text)}
        names = {LETTERS[k]: k for k in VALUES[kernel]}
        if set(found) != set(names) or cls(kernel, **{names[k]: v for k, v in found.items()}).code() != text:
            example = AttnConfig(kernel, 32, 4, 2, 128 if kernel == "extend_attention" else 0,
                                 16 if kernel == "decode_attention" else 0).code()
            raise AstraError(f"not a {kernel} config code: {text!r} (e.g. {example})")
        return cls(kernel, **{names[k]: v for k, v in found.items()})

    @classmethod
    def from_launch(cls, kernel: str, kwargs: dict) -> "AttnConfig":
        """From the keywords a launcher handed the kernel (num_stages absent: Triton's default, 3)."""
        values = {k: int(kwargs.get(LAUNCH_NAMES[k], 3 if k == "stages" else 0)) for k in VALUES[kernel]}
        return cls(kernel, **values)

    def smem_bytes(self, head_dim: int, element: int = 2) -> int:
        """Shared memory of the pipelined loads: a K and a V tile per stage, and the Q tile (rows: BLOCK_H or
        BLOCK_M). An estimate from above of what Triton allocates (it may reuse buffers)."""
        rows = self.block_m or self.block_h
        return (max(1, self.stages) * 2 * self.block_n * head_dim + rows * head_dim) * element


@dataclass(frozen=True)
class AttnShape:
    """One attention layer as the kernels see it (per tensor-parallel rank)."""

    heads: int
    kv_heads: int
    head_dim: int
    dtype: str = "bfloat16"

    @property
    def group(self) -> int:
        return self.heads // self.kv_heads

    def describe(self) -> str:
        return f"{self.heads} q heads, {self.kv_heads} kv heads, head dim {self.head_dim}, {self.dtype}"


def rejected(config: AttnConfig, shape: AttnShape, smem: int = SMEM_BYTES) -> str:
    """Why `config` cannot run at `shape` ("" where it can)."""
    need = config.smem_bytes(shape.head_dim)
    if need > smem:
        return f"shared memory {need // 1024} KiB > {smem // 1024} KiB"
    if config.kernel == "decode_attention":
        if config.block_h < 16:
            return "BLOCK_H < 16 (tl.dot needs 16 rows)"
        if config.block_h > max(16, shape.group):
            return f"BLOCK_H {config.block_h} > max(16, {shape.group} q heads per kv head): only masked rows"
    return ""


def space(kernel: str, shape: AttnShape, smem: int = SMEM_BYTES) -> tuple[list[AttnConfig], dict[str, str]]:
    """(every config that can run, {code: reason} of those filtered out)."""
    names = list(VALUES[kernel])
    ok, dropped = [], {}
    for values in itertools.product(*VALUES[kernel].values()):
        config = AttnConfig(kernel, **dict(zip(names, values)))
        reason = rejected(config, shape, smem)
        if reason:
            dropped[config.code()] = reason
        else:
            ok.append(config)
    return ok, dropped


def neighbors(config: AttnConfig, shape: AttnShape, smem: int = SMEM_BYTES) -> list[AttnConfig]:
    """Configs one step away along one knob that can run."""
    out = []
    for name, values in VALUES[config.kernel].items():
        current = getattr(config, name)
        if current not in values:
            continue
        i = values.index(current)
        for j in (i - 1, i + 1):
            if 0 <= j < len(values):
                other = replace(config, **{name: values[j]})
                if not rejected(other, shape, smem):
                    out.append(other)
    return out
