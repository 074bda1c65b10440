"""Typed results of a fused MoE tuning run: per batch size, SGLang's pick, the best config found, the speedup
confirmed by the final evaluation and what is written to the config file."""
from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, Field

from astra_sglang.triton.screen_records import ScreenStats

Verdict = Literal["tuned", "sglang-best", "no-valid-config", "not-measured"]


class BucketResult(BaseModel):
    tokens: int
    bucket: tuple[int, int] | None = None
    """Attention targets: (batch, kv length) or (extend, prefix length); `tokens` is its first value."""
    pick: str
    """Code of the config SGLang picks at this batch size."""
    pick_source: str
    """Where SGLang's pick comes from: a file (folder/name, key) or its default config."""
    best: str | None = None
    """The fastest correct config measured (may be SGLang's pick's equal)."""
    best_speedup: float | None = None
    """Its speedup over SGLang's pick in the search (interleaved, same process)."""
    measured: int = 0
    """Configs measured at this batch size (correct or not), the cache's included."""
    failed: int = 0
    """Configs that failed a check or did not fit the GPU."""
    chosen: str
    """What the written file holds at this batch size: the best config where it won, else SGLang's pick."""
    verdict: Verdict
    final_speedup: float | None = None
    """`chosen` against SGLang's pick in the final evaluation (full checks, a new process)."""
    final_us: float | None = None
    pick_us: float | None = None
    screened: int = 0
    """Configs the screening tier measured here (its cache's included); 0: no screening."""
    screen_best: str | None = None
    screen_us: float | None = None
    """The best screened config's time (kernel time of one call, CUDA-graph replay)."""
    screen_pick_us: float | None = None
    """SGLang's pick's screened time."""


class TuneResult(BaseModel):
    kernel: str = "fused_moe"
    date: str
    gpu: str
    triton: str
    sglang: str
    source_hash: str
    shape: dict[str, int | str]
    """fused_moe: experts, inter, hidden, topk, dtype; attention: heads, kv_heads, head_dim, dtype, splits."""
    buckets: list[BucketResult]
    evaluations: int
    """Isolated evaluations run (each: one process, every check, candidate and SGLang's pick interleaved)."""
    cached: int = 0
    """Measurements taken from the cache instead of evaluated again."""
    seconds: float
    final_ok: bool = False
    final_reason: str = ""
    config_file: str = ""
    patch_dir: str = ""
    """Attention targets: the triton-launch patch folder written (empty when nothing beat SGLang)."""
    filtered: dict[str, str] = Field(default_factory=dict)
    """Attention targets: configs of the space that cannot run at this shape -> why (never timed)."""
    """The file written in SGLang's layout (relative to the patch folder), empty when nothing beat SGLang."""
    command: str = ""
    notes: list[str] = Field(default_factory=list)
    screen: list[ScreenStats] = Field(default_factory=list)
    """The screening tier's figures per batch size (empty: the search ran without it)."""

    def geomean(self) -> float | None:
        values = [b.final_speedup for b in self.buckets if b.final_speedup]
        return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None
