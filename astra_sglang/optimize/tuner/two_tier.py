"""The two tiers: the screening tier measures each bucket's ordered space fast, its finalists go to the strict
isolated evaluator (bucket.py), and only the strict tier decides what is written: a screening figure never
ships on its own.

`screen_buckets` runs a screener (a host's ScreenPool, or RayScreener past one host) over the buckets in turn,
sharing a budget: each bucket gets an equal share of what is left, so time a quick bucket leaves goes to the
ones after it. Results already in the screen cache (same GPU, Triton, kernel source, shape) are not screened
again, except the op's own pick, screened in every run: the finalists are the configs that screened at least as
fast as it (within FINALIST_SLACK), fastest first.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Hashable, Protocol

from astra_sglang.triton.screen_records import Screened, ScreenStats

FINALIST_SLACK = 1.01
"""A finalist screened no slower than the pick x this (screening is one process and a few replays: a config
within 1% of the pick may still beat it under the strict evaluator)."""
JUDGE_CUT_SHARE = 0.5
"""A bucket whose screen a deadline cut still goes to the strict tier once it holds this share of its order: in the
seven whole unquantized fused MoE screens on H200 of 2026-11-27 (the moe-bar and moe-tiers pages' screen/*.jsonl.gz,
rows in the order they were screened), the screen's best came at most 15% into its order and the last config
within 1% of it at most 30% in (Mixtral 8x14336x4096 @64; counted among the configs timed in full alone, 20% and
42%: tests/screening/test_two_tier.py). The ordering puts the likely winners first; the tail a cut leaves rarely
holds one."""
KEEP = ("done", "slow", "compile", "load", "launch", "check", "crash", "hang")
"""Screening ends the cache keeps: the config's own outcome (not a budget's, nor a worker lost to staleness)."""


class Screener(Protocol):
    def screen(self, bucket, configs: list[str], budget_s: float | None = None, deadline: float | None = None,
               on_result: Callable[[Screened], None] | None = None) -> tuple[list[Screened], ScreenStats]: ...


@dataclass
class BucketScreen:
    results: list[Screened]
    """Every config of the order (cached ones included), in order."""
    stats: ScreenStats
    reused: int = 0
    pruned: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, bucket, known: dict[str, Screened], codes: list[str] | None = None) -> "BucketScreen":
        """The screen of `bucket` that records hold (config -> its row), in `codes`' order (default: theirs)."""
        codes = list(known) if codes is None else codes
        results = [known[c] for c in codes if c in known]
        return cls(results=results, stats=ScreenStats.of(bucket, codes, results, gpus=[], wall_s=0.0))

    def ranked(self) -> list[Screened]:
        """The configs that screened, fastest first."""
        return sorted((r for r in self.results if r.ok), key=lambda r: r.us)

    def pick_us(self, pick: str) -> float | None:
        return next((r.us for r in self.results if r.config == pick and r.ok), None)


def finalists(screen: BucketScreen, pick: str, count: int, slack: float = FINALIST_SLACK,
              family: Callable[[str], Hashable] | None = None) -> list[str]:
    """Up to `count` configs that screened as fast as the pick (or the fastest, where the pick did not screen),
    fastest first. With `family` (a config's tile, say), the fastest of each family come first: the screening's
    top can be one tile's variants a fraction of a percent apart (Qwen3-30B-A3B @64 on an H200, 2026-11-27: its five
    fastest were m16n64k128 variants, SGLang tuner's best tile sixth; moe-bar page), and the strict tier, timing as
    the server runs (L2 cold), may rank the tiles otherwise."""
    bar = screen.pick_us(pick)
    fast = [r.config for r in screen.ranked() if r.config != pick and (bar is None or r.us <= bar * slack)]
    if family is not None:
        heads: dict = {}
        for code in fast:  # in rank order: the first of a family is its fastest
            heads.setdefault(family(code), code)
        first = set(heads.values())
        fast = [*heads.values(), *(c for c in fast if c not in first)]
    return fast[:count]


def screen_buckets(screener: Screener, orders: dict[Hashable, list[str]], picks: dict[Hashable, str],
                   budget_s: float | None = None, deadline: float | None = None, cache=None,
                   key: Callable[[Hashable], object] | None = None, pruned: dict | None = None,
                   on_bucket: Callable[[Hashable, int], None] | None = None,
                   on_result: Callable[[Screened], None] | None = None) -> dict[Hashable, BucketScreen]:
    started = time.time()
    out: dict[Hashable, BucketScreen] = {}
    buckets = list(orders)
    for i, bucket in enumerate(buckets):
        share = None
        if budget_s is not None:
            share = max(0.0, (budget_s - (time.time() - started)) / (len(buckets) - i))
        known = {c: m for c, m in (cache.lookup(key(bucket)) if cache else {}).items() if c != picks[bucket]}
        todo = [c for c in orders[bucket] if c not in known]
        if on_bucket:
            on_bucket(bucket, len(todo))
        if todo:
            results, stats = screener.screen(bucket, todo, budget_s=share, deadline=deadline, on_result=on_result)
        else:  # everything known: no worker needs to prepare the bucket
            results, stats = [], ScreenStats.of(bucket, [], [], gpus=[], wall_s=0.0)
        if cache:
            cache.add_many(key(bucket), [r for r in results if r.stage in KEEP])
        by = {r.config: r for r in results}
        reused = {c: m.model_copy(update={"worker": "cache"}) for c, m in known.items()}
        merged = [by.get(c) or reused[c] for c in orders[bucket]]
        out[bucket] = BucketScreen(results=merged, stats=stats, reused=len(set(known) & set(orders[bucket])),
                                   pruned=(pruned or {}).get(bucket, {}))
    return out


def judgeable(known: dict[str, Screened], codes: list[str]) -> bool:
    """Whether the strict tier may judge a bucket from the screen `known` holds of its order `codes`: screened
    whole, or cut past JUDGE_CUT_SHARE of it."""
    return bool(codes) and sum(c in known for c in codes) >= JUDGE_CUT_SHARE * len(codes)
