"""The serving intervals on synthetic data with known offsets and variances: Student's t against its table, and
the coverage of each design's interval near 95% where its unit carries the start-to-start variance, far below
it where the rounds are taken as the unit (why `ab` refuses that), plus the A/A rule."""
from __future__ import annotations

import math

import numpy as np
import pytest

from astra_sglang import stats
from astra_sglang.serving import design_stats, designs, intervals

SIMS = 1500  # coverage sd at 95%: 0.56%; a fixed seed makes each test deterministic


@pytest.mark.parametrize("df, want", [(1, 12.7062), (2, 4.3027), (4, 2.7764), (6, 2.4469), (30, 2.0423),
                                      (5000, 1.9600)])
def test_t_quantile_matches_the_table(df, want):
    assert stats.t_quantile(0.975, df) == pytest.approx(want, abs=2e-4)
    assert stats.t_quantile(0.025, df) == pytest.approx(-want, abs=2e-4)


@pytest.mark.parametrize("p, df", [(0.0, 3), (1.0, 3), (0.5, 0)])
def test_t_quantile_rejects_bad_arguments(p, df):
    with pytest.raises(ValueError):
        stats.t_quantile(p, df)


def _metric(value: float) -> dict:
    return {"output_throughput": value}


def crossover_rows(rng, periods, rounds, delta, gpu_sd, start_sd, round_sd, drift=0.0):
    """Rows of a crossover run: each period restarts both servers (a start offset each), GPU 1 slower than GPU 0
    by a fixed log offset, a drift over the run both arms share within a round, and round noise."""
    gpu_effect = [0.0, -abs(rng.normal(0, gpu_sd))]
    rows, t = [], 0
    for period in designs.crossover(periods, rounds):
        offsets = {s.arm: rng.normal(0, start_sd) for s in period.slots}
        for r in range(1, rounds + 1):
            t += 1
            for s in period.slots:
                log = math.log(1000) + drift * t + gpu_effect[s.gpu] + offsets[s.arm] + rng.normal(0, round_sd)
                log += delta if s.arm == "B" else 0.0
                rows.append({"design": "crossover", "period": period.index, "round": r, "arm": s.arm,
                             "gpu_index": s.gpu, "metrics": _metric(math.exp(log))})
    return rows


def restart_rows(rng, starts_per_arm, rounds, delta, start_sd, round_sd, drift=0.0):
    rows, t = [], 0
    for period in designs.restarts(starts_per_arm, rounds):
        arm = period.slots[0].arm
        offset = rng.normal(0, start_sd)
        for r in range(1, rounds + 1):
            t += 1
            log = math.log(1000) + drift * t + offset + rng.normal(0, round_sd) + (delta if arm == "B" else 0.0)
            rows.append({"design": "restarts", "period": period.index, "round": r, "arm": arm, "gpu_index": 0,
                         "metrics": _metric(math.exp(log))})
    return rows


def covered(interval, delta) -> bool:
    true_pct = intervals.pct(delta)
    return interval.lo <= true_pct <= interval.hi


@pytest.mark.parametrize("periods, rounds", [(4, 2), (6, 3), (9, 2)])
def test_crossover_interval_covers_near_95_percent_with_gpu_and_start_effects(periods, rounds):
    rng = np.random.default_rng(periods * 100 + rounds)
    delta = math.log(1.03)
    hits = 0
    for _ in range(SIMS):
        rows = crossover_rows(rng, periods, rounds, delta, gpu_sd=0.05, start_sd=0.03, round_sd=0.01, drift=0.002)
        interval, _, units, _ = design_stats.crossover_change(rows, "output_throughput")
        assert interval.df == periods - 2 and units == periods and interval.rounds == periods * rounds
        hits += covered(interval, delta)
    assert 0.93 <= hits / SIMS <= 0.97


def test_rounds_as_units_would_cover_far_less_than_95_percent():
    """The interval the report refuses to make: a t over every round of a crossover, as if rounds of one start
    were independent. With a 3% start offset it misses the true change most of the time."""
    rng = np.random.default_rng(7)
    delta, hits = math.log(1.03), 0
    for _ in range(SIMS):
        rows = crossover_rows(rng, 4, 3, delta, gpu_sd=0.0, start_sd=0.03, round_sd=0.01)
        _, pcts, _, _ = design_stats.crossover_change(rows, "output_throughput")
        naive = intervals.one_sample([math.log1p(p / 100) for p in pcts], "round", len(pcts), "t over rounds")
        hits += covered(naive, delta)
    assert hits / SIMS < 0.75


@pytest.mark.parametrize("starts_per_arm, rounds", [(3, 2), (4, 3), (6, 1)])
def test_restarts_interval_covers_near_95_percent_with_drift(starts_per_arm, rounds):
    rng = np.random.default_rng(starts_per_arm * 10 + rounds)
    delta, hits = math.log(0.98), 0
    for _ in range(SIMS):
        rows = restart_rows(rng, starts_per_arm, rounds, delta, start_sd=0.03, round_sd=0.01, drift=0.001)
        interval, _, _, _ = design_stats.restarts_change(rows, "output_throughput")
        assert interval.unit == "start" and interval.units == 2 * starts_per_arm
        hits += covered(interval, delta)
    assert 0.92 <= hits / SIMS <= 0.975  # Welch's df is an approximation: a little looser


def test_paired_design_interval_is_uncontrolled_and_makes_no_claim():
    """One start per arm: a +14% start offset of B (the H100 A/A) shows as a tight, wrong 'effect'."""
    rows = []
    for run in range(1, 9):
        order = "AB" if run % 2 else "BA"
        for arm in order:
            rows.append({"paired": True, "run": run, "order": order, "arm": arm,
                         "metrics": _metric(1000 * (0.86 if arm == "B" else 1.0) * (1 + 0.001 * (-1) ** run))})
    c = design_stats.change(rows, "output_throughput", "output throughput", "tok/s", True)
    assert c.design == "paired" and not c.interval.controlled and c.interval.unit == "round"
    assert c.interval.hi < 0  # excludes 0 ...
    assert c.verdict.startswith("uncontrolled, no claim")  # ... and claims nothing
    assert "start-to-start variance not included" in c.interval.label()
    licensed = design_stats.change(rows, "output_throughput", "output throughput", "tok/s", True, licensed=True)
    assert licensed.verdict.startswith("B worse")


def test_no_interval_below_the_units_the_unit_needs_whatever_the_rounds():
    rng = np.random.default_rng(1)
    one_period = crossover_rows(rng, 1, 8, 0.0, 0.0, 0.03, 0.01)
    c = design_stats.change(one_period, "output_throughput", "thr", "tok/s", True)
    assert c.interval is None and c.rounds == 8
    assert c.verdict.startswith("no interval: 1 period(s)") and "the unit is the period" in c.verdict
    two = restart_rows(rng, 3, 2, 0.0, 0.03, 0.01)[:6]  # A, B, B: one start of A
    c = design_stats.change(two, "output_throughput", "thr", "tok/s", True)
    assert c.interval is None and "1 start(s) of A" in c.why_none


def test_label_names_level_method_units_rounds_and_df():
    rng = np.random.default_rng(3)
    c = design_stats.change(crossover_rows(rng, 6, 2, 0.0, 0.02, 0.02, 0.01), "output_throughput", "thr", "", True)
    assert c.interval.label() == "95% crossover t-interval (GPU term fitted), 6 periods (12 rounds), 4 df"


def _aa(typical, lo, hi, rounds=8, controlled=True):
    i = intervals.Interval(typical, lo, hi, 4, 6, "period", rounds, "crossover t-interval", controlled)
    return design_stats.Change("output_throughput", "thr", "", True, "crossover", i, typical, rounds, 6, 3)


@pytest.mark.parametrize("change, ok, reason", [
    (_aa(0.5, -1.5, 2.5), True, None),
    (_aa(0.5, -1.5, 2.5, rounds=6), False, "6 rounds < 8"),
    (_aa(-2.5, -4.0, 0.5), False, "beyond +-2%"),
    (_aa(1.5, 0.5, 2.5), False, "excludes 0"),
    (_aa(0.5, -1.5, 2.5, controlled=False), False, "paired design"),
])
def test_aa_check(change, ok, reason):
    check = design_stats.aa_check(change)
    assert check.ok is ok
    assert ok or any(reason in r for r in check.reasons)
