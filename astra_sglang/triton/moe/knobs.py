"""The split-K knob as a dimension of fused MoE's config space: its values per GEMM, the codes that name a
config with them, and which values are worth measuring at a batch size.

A `Variant` is a config (space.MoeConfig) plus a split for each of the two GEMMs: the gate/up projection
(B = w1: n = 2 N, k = hidden) and the down projection (B = w2: n = hidden, k = N). Its code is the config's with
`su<up>sd<down>` appended where either split is not 1 (m16n64k128g1w4s4su1sd4); in a config file the splits are
the extra keys SPLIT_K_UP / SPLIT_K_DOWN.

Which splits are tried (`split_values`): a split pays where a GEMM has too few output blocks to fill the GPU and
a long K to share. The expected output blocks of a GEMM at a batch size are the expert blocks its token slots
fill (experts hit x M-blocks each, routing taken as uniform) times its N-blocks; a split s is tried while
blocks x s stays within WAVES waves of the SMs and every split still walks MIN_TILES K tiles. At Mixtral's
down projection (hidden 4096, N = 14336, top-2) at batch 1 with BLOCK_SIZE_N 64: 2 experts x 1 M-block x 64
N-blocks = 128 blocks for 132 SMs, so splits 2 and 4 are tried; at batch 256 (8 experts x 4 M-blocks of 16 rows)
x 64 = 2048 blocks: none.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from astra_sglang.errors import AstraError
from astra_sglang.triton.moe.space import MoeConfig

SPLITS = (1, 2, 4, 8, 16)
WAVES = 4
"""Blocks x split may fill the SMs this many times (more blocks than SMs still hide memory latency)."""
MIN_TILES = 2
SMS = 132
"""An H100's / H200's SM count; callers with a GPU pass its own."""
KEYS = {"up": "SPLIT_K_UP", "down": "SPLIT_K_DOWN"}
"""The extra keys of a config file entry (a triton-source patch's files)."""
_SUFFIX = re.compile(r"^(.*)su(\d+)sd(\d+)$")


@dataclass(frozen=True, order=True)
class SplitK:
    up: int = 1
    down: int = 1

    def __post_init__(self):
        if self.up < 1 or self.down < 1:
            raise AstraError(f"a split-K value is at least 1, not {self.up}/{self.down}")

    @property
    def trivial(self) -> bool:
        return self.up == 1 and self.down == 1

    def code(self) -> str:
        return "" if self.trivial else f"su{self.up}sd{self.down}"


@dataclass(frozen=True, order=True)
class Variant:
    config: MoeConfig
    split: SplitK = field(default_factory=SplitK)

    def code(self) -> str:
        return self.config.code() + self.split.code()

    @classmethod
    def from_code(cls, text: str) -> "Variant":
        m = _SUFFIX.match(text)
        if not m:
            return cls(MoeConfig.from_code(text))
        return cls(MoeConfig.from_code(m.group(1)), SplitK(int(m.group(2)), int(m.group(3))))

    def file_entry(self) -> dict[str, int]:
        """The config file's entry: SGLang's keys, plus the split keys where a split is not 1."""
        extra = {KEYS[g]: v for g, v in (("up", self.split.up), ("down", self.split.down)) if v != 1}
        return {**self.config.sglang(), **extra}

    def screen_code(self, source: str = "splitk") -> str:
        """The screening tier's code (optimize/tuner/moe_screen.py): `<config>+<variant>:KEY=VALUE,...`, the knobs as the
        config file's keys; the config's own code where no split is set."""
        extra = {k: v for k, v in self.file_entry().items() if k in KEYS.values()}
        return self.config.code() + (f"+{source}:" + ",".join(f"{k}={v}" for k, v in extra.items()) if extra else "")

    @classmethod
    def from_screen_code(cls, text: str) -> "Variant":
        """The inverse of `screen_code` (whatever the variant's name): a plain config's code is that config."""
        base, _, rest = text.partition("+")
        knobs = dict(item.split("=", 1) for item in filter(None, rest.partition(":")[2].split(",")))
        return cls(MoeConfig.from_code(base), SplitK(int(knobs.get(KEYS["up"], 1)), int(knobs.get(KEYS["down"], 1))))

    @classmethod
    def from_file_entry(cls, entry: dict) -> "Variant":
        known = {k: v for k, v in entry.items() if k not in KEYS.values()}
        return cls(MoeConfig.from_sglang(known), SplitK(int(entry.get(KEYS["up"], 1)), int(entry.get(KEYS["down"], 1))))


def strip(entry: dict) -> dict:
    """A file entry without the split keys: what SGLang itself is given to read."""
    return {k: v for k, v in entry.items() if k not in KEYS.values()}


def expected_blocks(tokens: int, experts: int, topk: int, block_m: int, block_n: int, n: int) -> float:
    """Output blocks of one GEMM at `tokens` tokens, routing taken as uniform over the experts."""
    slots = tokens * topk
    hit = experts * (1.0 - (1.0 - min(topk, experts) / experts) ** tokens)
    return hit * math.ceil(slots / hit / block_m) * math.ceil(n / block_n)


def split_values(blocks: float, k: int, block_k: int, sms: int = SMS) -> list[int]:
    """The splits worth measuring for a GEMM of `blocks` output blocks and depth `k` (1 always)."""
    return [s for s in SPLITS if s == 1 or (blocks * s <= WAVES * sms and k >= MIN_TILES * s * block_k)]


def extend(config: MoeConfig, tokens: int, experts: int, inter: int, hidden: int, topk: int,
           sms: int = SMS) -> list[Variant]:
    """The config with every split pair worth measuring at this batch size, the config itself (no split) first."""
    def values(n: int, k: int) -> list[int]:
        blocks = expected_blocks(tokens, experts, topk, config.block_m, config.block_n, n)
        return split_values(blocks, k, config.block_k, sms)

    return [Variant(config, SplitK(u, d)) for u in values(2 * inter, hidden) for d in values(hidden, inter)]
