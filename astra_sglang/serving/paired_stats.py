"""Paired statistics of `ab --paired`: per round, B's change vs A in %, the median change over rounds, a
bootstrap interval of that median, and a verdict.

Pairing removes the drift both servers share (GPU clocks, host load over minutes): within one server start the
throughput already ranged over 11%, so comparing per-arm medians needs many more runs than comparing each
round's B with the A measured seconds before or after it. Stdlib only (random, statistics): no numpy needed.
"""
from __future__ import annotations

import random
import statistics
from dataclasses import dataclass

MIN_ROUNDS = 3  # no interval below this
# Below this the bootstrap interval of the median is the range of the rounds' changes, so it excludes 0 whenever
# all rounds agree: pure noise does that in 2 / 2**n of A/Bs (25% with 3 rounds, 12.5% with 4; ~6% from 5 on,
# simulated). The verdict says so.
RELIABLE_ROUNDS = 5
RESAMPLES = 10_000
LEVEL = 0.95


@dataclass(frozen=True)
class RoundChange:
    run: int
    order: str
    pct: float  # (B - A) / A * 100 in this round


@dataclass(frozen=True)
class PairedChange:
    key: str
    label: str
    unit: str
    higher_is_better: bool
    rounds: list[RoundChange]
    median_pct: float
    lo: float | None  # bootstrap interval of median_pct; None with fewer than MIN_ROUNDS rounds
    hi: float | None
    better: int  # rounds in which B beat A on this metric

    @property
    def n(self) -> int:
        return len(self.rounds)

    @property
    def verdict(self) -> str:
        if self.lo is None or self.hi is None:
            return f"too few rounds for an interval ({self.n} < {MIN_ROUNDS})"
        bounds = f"[{self.lo:+.2f}, {self.hi:+.2f}]%"
        if self.lo > 0 or self.hi < 0:
            better = (self.lo > 0) == self.higher_is_better
            caveat = (f" (but with {self.n} rounds the interval is the rounds' range: noise alone gives this in 1 of "
                      f"{2 ** (self.n - 1)} A/Bs; run at least {RELIABLE_ROUNDS})") if self.n < RELIABLE_ROUNDS else ""
            return f"B {'better' if better else 'worse'}: the interval {bounds} excludes 0{caveat}"
        return f"no difference detected: the interval {bounds} includes 0"


def bootstrap_median_interval(values: list[float], resamples: int = RESAMPLES, level: float = LEVEL,
                              seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the median; a fixed seed, so a report is reproducible from its rows."""
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples))
    tail = (1 - level) / 2
    return meds[round(tail * resamples)], meds[round((1 - tail) * resamples) - 1]


def round_values(rows: list[dict], key: str) -> list[tuple[int, str, float, float]]:
    """(round, order, A's value, B's value) of every paired round that has the metric on both arms."""
    by_round: dict[int, dict[str, dict]] = {}
    for row in rows:
        if row.get("paired") and key in row.get("metrics", {}):
            by_round.setdefault(row["run"], {})[row["arm"]] = row
    return [(run, arms["B"].get("order", ""), arms["A"]["metrics"][key], arms["B"]["metrics"][key])
            for run, arms in sorted(by_round.items()) if "A" in arms and "B" in arms]


def round_changes(rows: list[dict], key: str) -> list[RoundChange]:
    """B vs A in % per paired round, in round order (rounds where A's value is 0 have no ratio)."""
    return [RoundChange(run, order, (b - a) / a * 100) for run, order, a, b in round_values(rows, key) if a]


def paired_change(rows: list[dict], key: str, label: str, unit: str, higher: bool) -> PairedChange | None:
    changes = round_changes(rows, key)
    if not changes:
        return None
    pcts = [c.pct for c in changes]
    lo, hi = bootstrap_median_interval(pcts) if len(pcts) >= MIN_ROUNDS else (None, None)
    better = sum(1 for p in pcts if (p > 0 if higher else p < 0))
    return PairedChange(key, label, unit, higher, changes, statistics.median(pcts), lo, hi, better)


def analyse(rows: list[dict], metrics) -> list[PairedChange]:
    """One PairedChange per (key, label, unit, higher_is_better) in `metrics` that paired rows have."""
    return [c for key, label, unit, higher in metrics if (c := paired_change(rows, key, label, unit, higher))]


def round_table(changes: list[PairedChange]) -> list[dict]:
    """Rows of the per-round table: round, order, and each metric's change in % (None where it is missing)."""
    cells = {c.key: {r.run: r for r in c.rounds} for c in changes}
    runs = sorted({r.run for c in changes for r in c.rounds})
    return [dict(run=run, order=next(cells[c.key][run].order for c in changes if run in cells[c.key]),
                 pcts=[cells[c.key][run].pct if run in cells[c.key] else None for c in changes]) for run in runs]


def kv_pools(rows: list[dict]) -> dict[str, int | None]:
    """Each arm's KV pool in tokens (from its first paired row): pools of different sizes confound the A/B."""
    pools: dict[str, int | None] = {}
    for row in rows:
        if row.get("paired"):
            pools.setdefault(row["arm"], row.get("kv_tokens"))
    return pools


def started_first(rows: list[dict]) -> str | None:
    """The arm whose server started first (the other sized its pools and settings from what was left), or None."""
    return next((row["arm"] for row in rows if row.get("paired") and row.get("started_first")), None)
