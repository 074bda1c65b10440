"""benchmarks/moe_screen_bench.py with simulated GPUs (the cost model's times): every phase writes its row, the
summary holds the screening table, the targets and the tiers process's summary per batch size; a deadline cuts
phases, and the summary says what was not run."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _bench(tmp_path, *args, rc: int = 0) -> tuple[list[dict], str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path]),
           "ASTRA_SGLANG_CACHE": str(tmp_path / "cache"), "ASTRA_COMMIT": "c0ffee1"}
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "moe_screen_bench.py"), "--out", str(out),
                           "--simulate", "--shapes", "qwen3", "--sim-call-s", "0.0005", *args],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == rc, proc.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "moe_screen.jsonl").read_text().splitlines()]
    return rows, (out / "moe_screen.md").read_text() + proc.stderr


def test_every_phase_and_the_two_tiers(tmp_path):
    """Two simulated GPUs: the tiers run in their own process on GPU 1 beside the scaling phases on GPU 0, which
    GPU 1 joins for warm2 once the tiers are done; one worker per GPU for all phases (started once)."""
    rows, md = _bench(tmp_path, "--warm", "100", "--buckets", "1,64", "--extra", "", "--deadline", "520")
    phases = [r for r in rows if r["kind"] == "phase"]
    assert [r["phase"] for r in phases] == ["cold", "warm1", "warm2"]
    cold, warm1, warm2 = phases
    assert cold["screened"] == cold["configs"] > 1000 and cold["dropped"] > 0 and cold["hit_rate"] == 1.0
    assert cold["timed"] == cold["screened"] and not cold["failing"] and warm1["start_s"] == 0.0
    assert "commit c0ffee1" in md and "over the timed part" in md
    assert cold["compile_jobs"] == 2 * cold["configs"]  # two GEMMs a config, each compiled once
    assert warm1["configs"] == warm2["configs"] == 100 and warm2["gpus"] == 2
    assert warm1["compile_cached"] == warm1["compile_jobs"]  # everything was in the cache
    assert cold["pick_us"] and cold["best_us"] <= cold["pick_us"]
    verdicts = [json.loads(line) for line in (tmp_path / "out" / "tiers" / "verdicts.jsonl").read_text().splitlines()]
    screened = {v["tokens"]: v["screened"] for v in verdicts}
    assert screened[64] > 1000 and 250 < screened[1] < 400  # batch 1: the 16-row configs (moe_order.padded_only)
    assert json.loads((tmp_path / "out" / "tiers" / "plan.json").read_text())["gpus"] == ["1"]
    for section in ("## Screening", "## Targets", "two GPUs", "## Two tiers against SGLang's shipped pick",
                    "| qwen3 | 64 |"):
        assert section in md


def test_a_broken_setup_fails_loudly(tmp_path):
    """Every config failing at one stage (the compile processes could not compile, say) is no throughput: the
    phase says FAILED with the first reason, no rate is reported as one, the later phases are skipped and the
    bench exits 1."""
    rows, md = _bench(tmp_path, "--phases", "cold,warm1", "--sim-faults", '{"*": "compile"}', "--deadline", "60", rc=1)
    assert [r["phase"] for r in rows] == ["cold"] and rows[0]["failing"] == "compile" and rows[0]["timed"] <= 1
    assert rows[0]["per_gpu"] < 1 and rows[0]["reasons"]["compile"] == ["CompilationError: simulated"]
    assert "**FAILED**: qwen3 cold" in md and "`CompilationError: simulated`" in md and "FAILED: qwen3 cold" in md
    assert "configs timed/s on one GPU" not in md  # held to no target


def test_the_deadline_cuts_phases(tmp_path):
    rows, md = _bench(tmp_path, "--phases", "cold,tiers", "--deadline", "12")
    assert [r["phase"] for r in rows] == ["cold"] and rows[0]["screened"] < rows[0]["configs"]
    assert "cut by the deadline" in md and "left untuned" in md
