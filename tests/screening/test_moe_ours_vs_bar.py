"""benchmarks/gpu/moe_ours_vs_bar.sh on CPU: our two tiers (moe_tiers.sh, simulated: the cost model's times) for one
preset, their answer exported, and the bar (a stand-in recording what it was given) run with it as OURS; both walls
written. A failed export still runs SGLang's tuner, alone, and says so."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

BAR = """#!/usr/bin/env bash
# Records what the bar was given, and leaves a tuner.json as the real one does.
mkdir -p "$1"
{ for v in OURS RANKED PRESET BATCH_SIZES MODE DEADLINE TUNER_SHARE; do echo "$v=${!v-<unset>}"; done; } > "$1/seen.txt"
python3 - "$1/tuner.json" <<'PY'
import sys
from astra_sglang.triton.moe.sglang_tuner_records import TunerBatch, TunerRun
batches = [TunerBatch(tokens=t, mode="exhaustive", space=1920, cold_costs=[5.0, 1.0, 1.2, 0.8]) for t in (1, 64)]
run = TunerRun(files={}, mode="exhaustive", batches=batches, wall_s=285.0, gpus=["2", "3"], warm_s=160.0,
               timing_s=125.0)
open(sys.argv[1], "w").write(run.model_dump_json())
PY
exit 0
"""


def _run(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    bar = tmp_path / "bar.sh"
    bar.write_text(BAR)
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path]), "SIMULATE": "1",
               "ASTRA_SGLANG_CACHE": str(tmp_path / "cache"), "ASTRA_COMMIT": "c0ffee1", "WORK": str(tmp_path / "work"),
               "KNOB": "", "SETUP": "/dev/null", "BAR_RUNNER": str(bar), "PRESET": "qwen3-30b-a3b",
               "BAR_SCRIPT": "benchmarks/gpu/moe_ours_vs_bar.sh",  # as host_split.sh passes it: not run again
               "BATCH_SIZES": "1,64", "TIERS_S": "200", "TUNER_SHARE": "0.8", **env}
    return subprocess.run(["bash", "benchmarks/gpu/moe_ours_vs_bar.sh", str(tmp_path / "out")], cwd=ROOT,
                          env=environ, capture_output=True, text=True, timeout=600)


def _seen(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines())


def test_our_tiers_answer_goes_to_the_bar_as_ours_and_both_walls_are_written(tmp_path):
    done = _run(tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = tmp_path / "out"
    seen = _seen(out / "bar" / "seen.txt")
    assert seen["OURS"] == str(out / "ours" / "ours.json") and seen["RANKED"] == str(out / "ours" / "ranked.json")
    assert (seen["PRESET"], seen["BATCH_SIZES"], seen["MODE"], seen["DEADLINE"]) == ("qwen3-30b-a3b", "1,64",
                                                                                      "exhaustive", "280")
    assert seen["TUNER_SHARE"] == "0.8"  # the bar's own variables pass through
    ours = json.loads((out / "ours" / "ours.json").read_text())
    assert sorted(ours) == ["1", "64"] and all("BLOCK_SIZE_M" in c for c in ours.values())
    plan = json.loads((out / "tiers" / "plan.json").read_text())
    assert sorted(plan["units"]) == ["qwen3-30b-a3b@1", "qwen3-30b-a3b@64"]  # those batch sizes, no others
    walls = (out / "walls.txt").read_text().splitlines()
    assert walls[0].startswith("ours: our two tiers' command, ") and "(exit code 0), batch sizes 1,64" in walls[0]
    tuner_s = float((out / "tiers" / "tuner_wall_s").read_text())  # the tuner's process alone, inside the command's
    assert f"the tuner's own process {tuner_s:.1f} s, the rest this machine's set-up" in walls[0]
    assert 0 < tuner_s <= int(walls[0].split("command, ")[1].split(" s")[0]) + 1
    # 5 s once, then the mean of 1.0, 1.2, 0.8 over the other 1,919 configs; two batch sizes on two GPUs
    assert walls[1] == ("SGLang's tuner: this run's wall 285 s (warm 160 s, timing 125 s); its users' wall "
                        f"{(5.0 + 1.0 * 1919) / 60:.1f} min, estimated from the cold sample")


def test_a_failed_export_runs_sglangs_tuner_alone_and_says_so(tmp_path):
    done = _run(tmp_path, PRESET="no-such-preset")
    out = tmp_path / "out"
    assert "no answer of ours to compare (the export failed): SGLang's tuner runs alone" in done.stdout
    assert _seen(out / "bar" / "seen.txt")["OURS"] == "<unset>"
    assert done.returncode != 0  # the tiers failed on the unknown preset: the command says so in its exit code


def test_a_plan_that_would_leave_a_batch_size_unjudged_is_refused_before_any_worker(tmp_path):
    """TIERS_S too short for both batch sizes: the tiers refuse at once (exit 3), naming the deadline that fits,
    and neither a screening worker nor the bar runs."""
    done = _run(tmp_path, TIERS_S="20")
    assert done.returncode == 3, done.stdout[-3000:] + done.stderr[-3000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("refused: "))
    assert "the plan defers qwen3-30b-a3b@" in line and "it fits with " in line and line.endswith("(TIERS_S)")
    fits = int(line.split("it fits with ")[1].split(" s left")[0])
    assert fits > 20
    out = tmp_path / "out"
    assert not (out / "bar").exists() and not list((out / "tiers").glob("screen/*.jsonl"))
    again = _run(tmp_path, TIERS_S=str(fits + 60))  # the deadline it named (and the set-up's margin) runs
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
