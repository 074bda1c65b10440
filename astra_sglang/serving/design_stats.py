"""B vs A per metric for each design's rows, with the interval its unit allows (serving/intervals.py), the
verdict it licenses, and the A/A control's pass rule.

Rows of the crossover and restarts designs carry `design`, `period`, `round`, `arm`, `gpu_index`; rows of the
paired design carry `paired`, `run` (its round) and `order` (serving/paired.py).
"""
from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass

from astra_sglang.serving import intervals
from astra_sglang.serving.intervals import Interval

METRICS = [("output_throughput", "output throughput", "tok/s", True),
           ("mean_ttft_ms", "mean TTFT", "ms", False),
           ("mean_itl_ms", "mean ITL", "ms", False)]
"""The metrics every A/B report compares: key, label, unit, True when higher is better."""
AA_MAX_PCT = 2.0
"""An A/A control passes when its typical change is at most this (and its interval holds 0)."""
AA_MIN_ROUNDS = 8
AA_MIN_DF = 3
"""And at least this many degrees of freedom in its interval: rounds inside few periods give a t-interval so wide
(1 df: t = 12.7; 2 df: 4.3; 3 df: 3.2) that it holds 0 whatever the noise, and the control would pass vacuously.
A crossover needs 5 periods (df = periods - 2), the restarts design 3 starts an arm."""


@dataclass(frozen=True)
class Change:
    key: str
    label: str
    unit: str
    higher_is_better: bool
    design: str
    interval: Interval | None
    typical_pct: float | None
    """The median of the per-round changes (crossover, paired: rounds measured at the same time or seconds
    apart), or the interval's estimate (restarts, whose rounds are not paired)."""
    rounds: int
    """Timed rounds per arm."""
    units: int
    better: int
    """Rounds (crossover, paired) or starts' means (restarts: B's starts above A's mean) in B's favour."""
    why_none: str = ""
    licensed: bool = False
    """paired and restarts designs: an A/A of the same design passed (--aa), so the A/B may carry a claim
    (serving/license.py)."""
    control: bool = False
    """The rows are an A/A control's: judged by the A/A rule, not licensed."""

    @property
    def verdict(self) -> str:
        if self.interval is None:
            return f"no interval: {self.why_none}"
        i = self.interval
        bounds = f"[{i.lo:+.2f}, {i.hi:+.2f}]%"
        if not i.controlled and not self.licensed:
            return (f"uncontrolled, no claim: {bounds} over rounds of one start per arm leaves out the "
                    f"start-to-start variance (an A/A of this design has not shown it equal; pass --aa)")
        if self.design == "restarts" and not self.licensed and not self.control:
            return (f"no claim: {bounds} from one server at a time, and no passing A/A of this design (--aa) has "
                    f"shown the host steady between starts")
        if i.contains_zero:
            return f"no difference detected: {bounds} includes 0"
        better = (i.lo > 0) == self.higher_is_better
        return f"B {'better' if better else 'worse'}: {bounds} excludes 0"


def _log(value: float) -> float | None:
    return math.log(value) if value and value > 0 else None


def _pairs(rows: list[dict], key: str) -> dict[tuple[int, int], dict[str, dict]]:
    """{(period, round): {arm: row}} of the design rows that have the metric."""
    out: dict[tuple[int, int], dict[str, dict]] = defaultdict(dict)
    for row in rows:
        if "period" in row and key in row.get("metrics", {}):
            out[(row["period"], row["round"])][row["arm"]] = row
    return out


def crossover_change(rows: list[dict], key: str) -> tuple[Interval | None, list[float], int, str]:
    """(interval, per-round % changes, periods, why no interval) of simultaneous A/B rounds."""
    per_period: dict[int, list[float]] = defaultdict(list)
    b_gpu: dict[int, int] = {}
    for (period, _), arms in sorted(_pairs(rows, key).items()):
        if "A" in arms and "B" in arms:
            a, b = _log(arms["A"]["metrics"][key]), _log(arms["B"]["metrics"][key])
            if a is not None and b is not None:
                per_period[period].append(b - a)
                b_gpu[period] = arms["B"].get("gpu_index", 0)
    ratios = [(statistics.fmean(v), b_gpu[p]) for p, v in sorted(per_period.items())]
    rounds = sum(len(v) for v in per_period.values())
    interval = intervals.crossover(ratios, rounds)
    why = "" if interval else (f"{len(ratios)} period(s) with B on {len(set(b_gpu.values()))} GPU(s); the crossover "
                               f"needs at least 3 periods, B on each GPU at least once (the unit is the period)")
    return interval, [intervals.pct(d) for v in per_period.values() for d in v], len(ratios), why


def restarts_change(rows: list[dict], key: str) -> tuple[Interval | None, dict[str, list[float]], int, str]:
    """(interval, each arm's start means as log values, timed rounds per arm, why none) of one-at-a-time starts."""
    starts: dict[int, tuple[str, list[float]]] = {}
    for row in rows:
        if "period" in row and key in row.get("metrics", {}) and (v := _log(row["metrics"][key])) is not None:
            starts.setdefault(row["period"], (row["arm"], []))[1].append(v)
    means = {arm: [statistics.fmean(v) for a, v in starts.values() if a == arm] for arm in ("A", "B")}
    rounds = sum(len(v) for a, v in starts.values() if a == "A")
    interval = intervals.welch(means["A"], means["B"], rounds)
    why = "" if interval else (f"{len(means['A'])} start(s) of A, {len(means['B'])} of B: the unit is the start, "
                               f"at least 2 per arm are needed (3 to claim)")
    return interval, means, rounds, why


def paired_change(rows: list[dict], key: str) -> tuple[Interval | None, list[float], str]:
    """(interval over rounds, per-round % changes, why none) of the paired one-GPU design."""
    by_round: dict[int, dict[str, dict]] = defaultdict(dict)
    for row in rows:
        if row.get("paired") and key in row.get("metrics", {}):
            by_round[row["run"]][row["arm"]] = row
    logs = [b - a for arms in (by_round[r] for r in sorted(by_round)) if "A" in arms and "B" in arms
            and (a := _log(arms["A"]["metrics"][key])) is not None and (b := _log(arms["B"]["metrics"][key])) is not None]
    interval = intervals.one_sample(logs, "round", len(logs), "t-interval over rounds", controlled=False)
    return interval, [intervals.pct(d) for d in logs], "" if interval else f"{len(logs)} round(s): at least 2 needed"


def design_of(rows: list[dict]) -> str:
    return next((r["design"] for r in rows if "design" in r), "paired" if any(r.get("paired") for r in rows) else "")


def change(rows: list[dict], key: str, label: str, unit: str, higher: bool, licensed: bool = False,
           control: bool = False) -> Change | None:
    """B vs A on one metric under the rows' design; None where no pair of values exists."""
    design = design_of(rows)
    if design == "crossover":
        interval, pcts, units, why = crossover_change(rows, key)
        typical = statistics.median(pcts) if pcts else None
        better = sum(1 for p in pcts if (p > 0) == higher and p != 0)
        rounds = len(pcts)
    elif design == "restarts":
        interval, means, rounds, why = restarts_change(rows, key)
        if not means["A"] or not means["B"]:
            return None
        base = statistics.fmean(means["A"])
        typical = interval.estimate if interval else intervals.pct(statistics.fmean(means["B"]) - base)
        better = sum(1 for m in means["B"] if (m > base) == higher and m != base)
        units = len(means["A"]) + len(means["B"])
    elif design == "paired":
        interval, pcts, why = paired_change(rows, key)
        typical = statistics.median(pcts) if pcts else None
        better = sum(1 for p in pcts if (p > 0) == higher and p != 0)
        rounds = units = len(pcts)
    else:
        return None
    if typical is None:
        return None
    return Change(key, label, unit, higher, design, interval, typical, rounds, units, better, why, licensed, control)


@dataclass(frozen=True)
class AACheck:
    ok: bool
    reasons: list[str]
    """What failed (empty when ok)."""


def aa_check(c: Change | None, require_controlled: bool = True, short_windows: str = "") -> AACheck:
    """The A/A control's rule: at least AA_MIN_ROUNDS timed rounds, a typical change of at most AA_MAX_PCT, an
    interval of at least AA_MIN_DF degrees of freedom (with start variance inside, unless not
    `require_controlled`) that holds 0, and no round whose timed
    window is too short to measure a server (`short_windows`: serving/window.py's reason, '' when none is)."""
    if c is None:
        return AACheck(False, ["no rounds"])
    reasons = [short_windows] if short_windows else []
    if c.rounds < AA_MIN_ROUNDS:
        reasons.append(f"{c.rounds} rounds < {AA_MIN_ROUNDS}")
    if c.typical_pct is None or abs(c.typical_pct) > AA_MAX_PCT:
        reasons.append(f"typical change {c.typical_pct:+.2f}% beyond +-{AA_MAX_PCT:g}%")
    if c.interval is None:
        reasons.append(f"no interval ({c.why_none})")
    else:
        if not c.interval.contains_zero:
            reasons.append(f"the interval [{c.interval.lo:+.2f}, {c.interval.hi:+.2f}]% excludes 0")
        if c.interval.df < AA_MIN_DF:
            reasons.append(f"{c.interval.df:.3g} degrees of freedom < {AA_MIN_DF} ({c.interval.units} "
                           f"{c.interval.unit}s): an interval that wide holds 0 whatever the noise")
        if require_controlled and not c.interval.controlled:
            reasons.append("the interval leaves out start-to-start variance (paired design)")
    return AACheck(not reasons, reasons)
