"""Confidence intervals of a serving A/B that mean what they say: Student-t intervals over the design's unit.

The unit is what carries the noise a claim must survive. Rounds of one server start share that start's offset
(one start of an identical server ran 14% slower than another, H100, 2026-11-25), so rounds are nested in starts
and the interval's unit is the start (restarts) or the period of two simultaneous starts (crossover); the rounds
of a unit are averaged first. Only the paired one-GPU design, one start per arm, has the round as its unit: its
interval leaves the start offset out and says so (`controlled` False).

Every change is computed on the log scale (a ratio B / A), so a +5% and a -5% start offset cancel, and reported
as a percentage. Student's t quantile: astra_sglang.stats.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from astra_sglang.stats import t_quantile

LEVEL = 0.95


def pct(log_ratio: float) -> float:
    """A log ratio as a % change of B vs A."""
    return 100.0 * math.expm1(log_ratio)


@dataclass(frozen=True)
class Interval:
    """A two-sided interval of B's change vs A in %, built for `level` from `units` independent units."""
    estimate: float
    lo: float
    hi: float
    df: float
    units: int
    unit: str
    """"period" (crossover: A and B started together, one per GPU), "start" (restarts), "round" (paired)."""
    rounds: int
    """Timed rounds behind it (per arm)."""
    method: str
    controlled: bool = True
    """Whether start-to-start variance is inside the interval (False: the paired one-GPU design)."""
    level: float = LEVEL

    @property
    def contains_zero(self) -> bool:
        return self.lo <= 0.0 <= self.hi

    def label(self) -> str:
        """How the report names the interval: its level, method, units and degrees of freedom, always together."""
        rounds = "" if self.unit == "round" else f" ({self.rounds} rounds)"
        text = f"{self.level:.0%} {self.method}, {self.units} {self.unit}s{rounds}, {self.df:.3g} df"
        return text if self.controlled else text + "; start-to-start variance not included"


def _t_bounds(mean: float, se: float, df: float, level: float) -> tuple[float, float]:
    half = t_quantile(0.5 + level / 2, df) * se
    return mean - half, mean + half


def one_sample(log_ratios: list[float], unit: str, rounds: int, method: str, controlled: bool = True,
               level: float = LEVEL) -> Interval | None:
    """Student-t interval of the mean log ratio over independent units (None below 2 units or with no spread
    information: a single unit cannot estimate its own variance)."""
    n = len(log_ratios)
    if n < 2:
        return None
    mean, sd = statistics.fmean(log_ratios), statistics.stdev(log_ratios)
    lo, hi = _t_bounds(mean, sd / math.sqrt(n), n - 1, level)
    return Interval(pct(mean), pct(lo), pct(hi), n - 1, n, unit, rounds, method, controlled, level)


def crossover(period_ratios: list[tuple[float, int]], rounds: int, level: float = LEVEL) -> Interval | None:
    """The two-period crossover analysis (Grizzle's, over many periods): each period's mean log ratio B / A
    with the GPU B ran on (0 or 1). d = delta + gamma * s (s = +-1 by B's GPU) fitted by least squares: delta is
    the mean of the two GPU groups' means, so a GPU offset cancels whatever the periods' split, and the residual
    variance has n - 2 degrees of freedom. None without a period on each GPU or below 3 periods."""
    groups = [[d for d, gpu in period_ratios if gpu == g] for g in (0, 1)]
    n = len(period_ratios)
    if n < 3 or not all(groups):
        return None
    means = [statistics.fmean(g) for g in groups]
    ss = sum((d - m) ** 2 for g, m in zip(groups, means) for d in g)
    df = n - 2
    se = math.sqrt(ss / df * 0.25 * (1 / len(groups[0]) + 1 / len(groups[1])))
    delta = (means[0] + means[1]) / 2
    lo, hi = _t_bounds(delta, se, df, level)
    return Interval(pct(delta), pct(lo), pct(hi), df, n, "period", rounds,
                    "crossover t-interval (GPU term fitted)", True, level)


def welch(a: list[float], b: list[float], rounds: int, level: float = LEVEL) -> Interval | None:
    """Welch's t-interval of mean(log B) - mean(log A) over server starts (each start's mean over its rounds):
    restarts in the order A B B A A B ..., where a linear drift cancels every four starts. None below two starts
    per arm."""
    if len(a) < 2 or len(b) < 2:
        return None
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    diff = statistics.fmean(b) - statistics.fmean(a)
    se = math.sqrt(va + vb)
    if se == 0:
        df = float(len(a) + len(b) - 2)
    else:  # Welch-Satterthwaite
        df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    lo, hi = _t_bounds(diff, se, df, level)
    return Interval(pct(diff), pct(lo), pct(hi), df, len(a) + len(b), "start", rounds,
                    "Welch t-interval over starts", True, level)
