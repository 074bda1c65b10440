"""Student's t distribution for the project's intervals (serving A/Bs, a tuner's wall estimated from a sample),
from mpmath's regularized incomplete beta: no scipy here. At the bottom layer, so that any stage can state an
interval with its degrees of freedom."""
from __future__ import annotations

import functools
import statistics

import mpmath

LARGE_DF = 2000


def t_cdf(x: float, df: float) -> float:
    """P(T <= x) for Student's t with df degrees of freedom."""
    tail = 0.5 * float(mpmath.betainc(df / 2, 0.5, 0, df / (df + x * x), regularized=True))
    return 1.0 - tail if x > 0 else tail


@functools.lru_cache(maxsize=4096)
def t_quantile(p: float, df: float) -> float:
    """The p quantile of Student's t (bisection on t_cdf; |t| < 1e4 covers df >= 1 at p <= 0.9995). Beyond
    LARGE_DF degrees of freedom the normal quantile, within 1e-3 of t's there."""
    if not 0.0 < p < 1.0 or df <= 0:
        raise ValueError(f"t_quantile needs 0 < p < 1 and df > 0, got p={p}, df={df}")
    if df > LARGE_DF:
        return statistics.NormalDist().inv_cdf(p)
    lo, hi = -1e4, 1e4
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_cdf(mid, df) < p else (lo, mid)
        if hi - lo < 1e-10:
            break
    return (lo + hi) / 2
