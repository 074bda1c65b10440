"""The Mixtral-shaped serving A/B's figures on its page (benchmarks/results/2026-11-28-h200/serving/summary.md),
from the committed rows: B's saving a layer in the server against the two timings of the same two configs."""
from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
AB = RESULTS / "2026-11-28-h200" / "serving" / "mixtral-ab"
FINAL = RESULTS / "2026-11-27-h200" / "moe-bar" / "ours-mixtral-8x7b-tp2-1" / "tiers" / "strict" / "mixtral-8x7b-tp2-1"
LAYERS = 32


def test_the_servers_saving_a_layer_is_the_back_to_back_timings_not_the_strict_ones():
    rows = [json.loads(line) for line in (AB / "ab.jsonl").read_text().splitlines()]
    itl = {arm: statistics.fmean(r["metrics"]["mean_itl_ms"] for r in rows if r["arm"] == arm) for arm in "AB"}
    assert (round(itl["A"], 3), round(itl["B"], 3)) == (5.162, 5.067)
    server_us = (itl["A"] - itl["B"]) * 1000 / LAYERS
    assert round(server_us, 2) == 2.95
    shape = json.loads((FINAL / "final.json").read_text())["shapes"][0]
    strict = (shape["baseline"]["median_us"], shape["candidate"]["median_us"])
    assert tuple(round(t, 2) for t in strict) == (140.24, 133.41) and shape["speedup"] == pytest.approx(1.044, 1e-3)
    script = (98.41, 95.62)  # SGLang's script, its bar run's report (pick, best = ours' config)
    assert "| 1 | 98.41 | 95.62 |" in (RESULTS / "2026-11-27-h200" / "moe-bar" / "mixtral-8x7b-tp2-1" / "bar.md").read_text()
    assert abs(server_us - (script[0] - script[1])) < 0.2  # 2.79 us: the back-to-back timing's gap
    assert (strict[0] - strict[1]) / server_us > 2.2  # 6.83 us: 2.3x what the server saved
    console = (FINAL.parents[2] / "tiers.console").read_text()  # the screening tier's figures of the two configs
    assert "best m16n64k128g1w4s5 96.6 us; SGLang's pick 97.5 us" in console
    page = (RESULTS / "2026-11-28-h200" / "serving" / "summary.md").read_text()
    assert "B saved 2.95 us a decode step" in page and "140.24 and 133.41 us" in page and "97.5 and 96.6 us" in page
