"""benchmarks/moe_screen_bench.py with simulated GPUs (the cost model's times): every phase writes its row, the
summary holds the screening table, the targets and the two tiers per batch size; a deadline cuts phases, and
the summary says what was not run."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _bench(tmp_path, *args) -> tuple[list[dict], str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path]),
           "ASTRA_SGLANG_CACHE": str(tmp_path / "cache")}
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "moe_screen_bench.py"), "--out", str(out),
                           "--simulate", "--shapes", "qwen3", "--sim-call-s", "0.0005", *args],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "moe_screen.jsonl").read_text().splitlines()]
    return rows, (out / "moe_screen.md").read_text()


def test_every_phase_and_the_two_tiers(tmp_path):
    rows, md = _bench(tmp_path, "--warm", "100", "--buckets", "1,64", "--screen-budget", "6", "--deadline", "400")
    phases = [r for r in rows if r["kind"] == "phase"]
    assert [r["phase"] for r in phases] == ["cold", "warm1", "warm2"]
    cold, warm1, warm2 = phases
    assert cold["screened"] == cold["configs"] > 1000 and cold["dropped"] > 0 and cold["hit_rate"] == 1.0
    assert cold["compile_jobs"] == 2 * cold["configs"]  # two GEMMs a config, each compiled once
    assert warm1["configs"] == warm2["configs"] == 100 and warm2["gpus"] == 2
    assert warm1["compile_cached"] == warm1["compile_jobs"]  # everything was in the cache
    assert cold["pick_us"] and cold["best_us"] <= cold["pick_us"]
    tiers = [r for r in rows if r["kind"] == "tier"]
    assert [r["tokens"] for r in tiers] == [1, 64] and all(r["screened"] > 0 for r in tiers)
    for section in ("## Screening", "## Targets", "two GPUs", "## Two tiers against SGLang's shipped pick",
                    "| qwen3 | 64 |"):
        assert section in md


def test_the_deadline_cuts_phases(tmp_path):
    rows, md = _bench(tmp_path, "--phases", "cold,tiers", "--deadline", "3")
    assert [r["phase"] for r in rows] == ["cold"] and rows[0]["screened"] < rows[0]["configs"]
    assert "cut by the deadline" in md and "Not run" in md
