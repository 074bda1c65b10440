"""The restarts design claims nothing without a passing A/A of its own (serving/license.py): its committed H200
A/A failed the rule, a synthetic steady one passes, and an A/B's verdict says which it had."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from astra_sglang.serving import design_stats, license
from tests.serving.test_intervals import restart_rows

ROOT = Path(__file__).resolve().parents[2]
H200_AA1 = ROOT / "benchmarks" / "results" / "2026-11-28-h200" / "serving" / "aa1"


def _write(folder: Path, rows: list[dict]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "ab.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def _windows(rows: list[dict], seconds: float = 15.0) -> list[dict]:
    return [{**r, "metrics": {**r["metrics"], "duration": seconds}} for r in rows]


def test_the_committed_one_gpu_restarts_aa_licenses_nothing():
    """2026-11-28, one H200: six starts of the dense model from -18% to +16%: the rule fails, so no restarts A/B
    on that host may claim."""
    assert not license.licensed_by(H200_AA1, "restarts")
    assert not license.licensed_by(H200_AA1, "crossover")


def test_a_steady_restarts_aa_licenses_the_design_and_only_it(tmp_path):
    rng = np.random.default_rng(3)
    steady = [{**r, "control": True} for r in _windows(restart_rows(rng, 4, 3, 0.0, 0.002, 0.002))]
    folder = _write(tmp_path / "aa", steady)
    assert license.licensed_by(folder, "restarts")
    assert not license.licensed_by(folder, "paired")
    patched = [{**r, "control": False} for r in steady]  # an A/B's rows are no A/A
    assert not license.licensed_by(_write(tmp_path / "ab", patched), "restarts")


@pytest.mark.parametrize("licensed, control, starts", [
    (False, False, "no claim: ["), (True, False, "B better: ["), (False, True, "B better: [")])
def test_a_restarts_ab_claims_only_with_a_licence(licensed, control, starts):
    """B 10% faster with little noise: the interval excludes 0, but only a licensed A/B (or the A/A's own rule
    check) says so; unlicensed, the verdict names what is missing."""
    rows = restart_rows(np.random.default_rng(5), 3, 3, math.log(1.10), 0.005, 0.005)
    c = design_stats.change(rows, "output_throughput", "output throughput", "tok/s", True, licensed, control)
    assert c.interval.lo > 0 and c.verdict.startswith(starts)
    if not licensed and not control:
        assert "no passing A/A of this design (--aa)" in c.verdict


def test_the_crossover_needs_no_licence():
    from tests.serving.test_intervals import crossover_rows

    rows = crossover_rows(np.random.default_rng(7), 6, 3, math.log(1.10), 0.01, 0.005, 0.005)
    c = design_stats.change(rows, "output_throughput", "output throughput", "tok/s", True)
    assert c.verdict.startswith("B better")


def test_a_restarts_runs_summary_claims_with_the_aa_it_is_given(tmp_path):
    """summary.summarize: a restarts A/B's verdict reads "no claim" alone, "B better" with a passing restarts A/A."""
    from astra_sglang.serving import designs, runner, summary
    from astra_sglang.serving.client import ClientSettings

    rng = np.random.default_rng(11)
    aa = _write(tmp_path / "aa", [{**r, "control": True} for r in _windows(restart_rows(rng, 4, 3, 0.0, 0.002, 0.002))])
    ab = _write(tmp_path / "ab", [{**r, "control": False} for r in _windows(restart_rows(rng, 3, 3, math.log(1.1),
                                                                                           0.004, 0.004))])
    plan = runner.RunPlan(design="restarts", periods=designs.restarts(3, 3), client=ClientSettings(), model_path="m",
                          gpus=[], port=31000)
    (ab / runner.PLAN).write_text(plan.model_dump_json())
    (ab / runner.STARTS).write_text("")
    alone = summary.summarize(ab).metrics[0]
    licensed = summary.summarize(ab, aa).metrics[0]
    assert alone.verdict.startswith("no claim: [") and licensed.verdict.startswith("B better: [")
