"""Typed records of the screening tier: what is compiled ahead, what one screened config gave, a run's figures.

A config travels as its code (a string the op's launch parses: `MoeConfig.code()` for fused MoE), a bucket as
an int or a tuple of ints (batch size; (batch, kv length) for attention): both pickle and serialize as they are.
"""
from __future__ import annotations

import hashlib
from typing import Literal

from pydantic import BaseModel, Field

Bucket = int | tuple[int, ...]
Stage = Literal["done", "slow", "compile", "load", "launch", "check", "crash", "hang", "stale", "unscreened"]
"""Where a config's screening ended: done (timed), slow (cut after its first replay: far slower than the best so
far), compile (Triton did not compile it), load (compiled, does not fit the GPU), launch (a Python-level error),
check (wrong results), crash (killed its worker: illegal address, segfault), hang (no answer in time),
stale (its worker stopped beating twice while on it), unscreened (the budget ran out first)."""


class CompileJob(BaseModel, frozen=True):
    """One Triton specialization to compile ahead of the GPU, as the worker's launch would look it up."""

    kind: Literal["triton", "simulated"] = "triton"
    module: str
    """The kernel's module name (`fn.__module__`), imported by the compile process."""
    path: str = ""
    """The module's file, for a module that is not importable by name (a generated kernel source)."""
    qualname: str
    data: str
    """Triton's specialization data (the JSON `JITFunction.preload` takes): signature, constexprs, alignment
    attributes, options."""
    target: tuple[str, int, int] = ("cuda", 90, 32)
    """GPUTarget(backend, arch, warp size) of the worker's GPU."""

    def digest(self) -> str:
        return hashlib.sha256(f"{self.module}:{self.qualname}:{self.target}:{self.data}".encode()).hexdigest()[:20]


class CompileOutcome(BaseModel):
    ok: bool
    seconds: float = 0.0
    cached: bool = False
    """It was in Triton's cache already (no compile ran)."""
    reason: str = ""
    ahead: bool = True
    """False: the compile process could not even load the kernel (the host's import error, not the config's):
    the worker compiles it itself when it screens the config."""


class Screened(BaseModel):
    """One config screened at one bucket."""

    config: str
    bucket: Bucket
    stage: Stage
    us: float | None = None
    """Median time of one op call over the timed replays (kernel time: CUDA-graph replay), microseconds."""
    spread: float | None = None
    """(p90 - p10) / median of the per-replay times."""
    replays: int = 0
    error: float | None = None
    """Worst |out - ref| / (atol + rtol |ref|) of the numerical check (<= 1 passes)."""
    reason: str = ""
    hits: int = 0
    """Triton compiles the worker's launch found in the on-disk cache (compiled ahead)."""
    misses: int = 0
    """Compiles the worker had to run itself."""
    worker: str = ""
    seconds: float = 0.0
    """Wall time the worker spent on it (load, check, capture, replays)."""
    at_s: float | None = None
    """When its result came, in seconds from the start of its bucket's screening."""

    @property
    def ok(self) -> bool:
        return self.stage == "done" and self.us is not None


REASONS_KEPT = 3


class ScreenStats(BaseModel):
    """One bucket's screening, as the benchmark and tune.md report it."""

    bucket: Bucket
    gpus: list[str]
    configs: int
    """Configs given (the ordered space)."""
    screened: int
    ok: int
    failed: dict[str, int] = Field(default_factory=dict)
    """Stage -> count of configs that did not finish."""
    reasons: dict[str, list[str]] = Field(default_factory=dict)
    """Stage -> the first few distinct reasons of the configs that failed there."""
    timed: int = 0
    """Configs checked and timed (done, or slow: cut after one replay): what a rate counts."""
    wall_s: float
    compile_jobs: int = 0
    """Distinct specializations sent to the compile pool (found in the cache there or compiled)."""
    compile_cached: int = 0
    """Of those, found in Triton's cache already (an earlier bucket, phase or run compiled them)."""
    compile_s: float = 0.0
    """CPU seconds of the compiles that ran (summed over processes)."""
    compile_failed: int = 0
    hits: int = 0
    misses: int = 0
    restarts: int = 0
    best: str | None = None
    best_us: float | None = None
    best_index: int | None = None
    """Position of the best config in the screening order (0: the first screened)."""
    best_at_s: float | None = None
    """When the best config's result came, in seconds from the start of the bucket's screening."""
    first_at_s: float | None = None
    """When the first result came: the workers' preparing (inputs, reference) and the first compiles before it."""
    notes: list[str] = Field(default_factory=list)
    """Workers that sat the bucket out, and why."""

    @classmethod
    def of(cls, bucket: Bucket, configs: list[str], results: list[Screened], **fields) -> "ScreenStats":
        """The counts, the best and its position from the results (in `configs` order); `fields` give the rest
        (gpus, wall_s, compile figures, restarts, notes)."""
        ok = [r for r in results if r.stage == "done"]
        best = min(ok, key=lambda r: r.us, default=None)
        failed: dict[str, int] = {}
        reasons: dict[str, list[str]] = {}
        for r in results:
            if r.stage not in ("done", "slow"):
                failed[r.stage] = failed.get(r.stage, 0) + 1
                seen = reasons.setdefault(r.stage, [])
                if r.reason and r.reason not in seen and len(seen) < REASONS_KEPT:
                    seen.append(r.reason)
        return cls(bucket=bucket, configs=len(configs), screened=sum(r.stage != "unscreened" for r in results),
                   ok=len(ok), failed=failed, reasons=reasons, timed=sum(r.stage in ("done", "slow") for r in results),
                   hits=sum(r.hits for r in results), misses=sum(r.misses for r in results),
                   best=best.config if best else None, best_us=best.us if best else None,
                   best_index=configs.index(best.config) if best else None,
                   best_at_s=best.at_s if best else None,
                   first_at_s=min((r.at_s for r in results if r.at_s is not None), default=None), **fields)

    @property
    def per_second(self) -> float:
        """Configs timed per second of wall: a config that failed before its timing does not count."""
        return self.timed / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def steady_per_second(self) -> float | None:
        """Configs timed per second from the first result on (preparing the bucket left out)."""
        if self.first_at_s is None or self.timed < 2 or self.wall_s <= self.first_at_s:
            return None
        return (self.timed - 1) / (self.wall_s - self.first_at_s)

    def failing_stage(self, share: float = 0.5) -> str | None:
        """The stage where more than `share` of the screened configs failed (a broken set-up, not bad configs)."""
        return next((stage for stage, n in self.failed.items()
                     if stage != "unscreened" and self.screened and n > share * self.screened), None)

    @property
    def hit_rate(self) -> float | None:
        total = self.hits + self.misses
        return self.hits / total if total else None
