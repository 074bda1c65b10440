"""benchmarks/gpu/onboard_run.sh's plumbing on CPU (SETUP=/dev/null, STEPS=ops, the stand-ins on the path): every op
of its list is onboarded from its committed calls file, its spec name found in onboard's output, and its bench run
(here: one line saying a GPU is needed); summary.md has one row per command. The GPU run itself is the lead's."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from onboard_support import STANDINS

REPO = Path(__file__).resolve().parents[2]


def test_the_ops_step_onboards_every_op_and_runs_its_bench(home, tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "SETUP": "/dev/null", "STEPS": "ops", "CUDA_VISIBLE_DEVICES": "",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": os.pathsep.join([str(REPO), str(STANDINS), os.environ.get("PYTHONPATH", "")])}
    env.pop("ASTRA_STANDIN_IMPORTS", None)
    done = subprocess.run(["bash", "benchmarks/gpu/onboard_run.sh", str(out)], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    rows = [line.split(" | ") for line in (out / "summary.md").read_text().splitlines()[2:]]
    steps = {row[0].lstrip("| "): row for row in rows}
    names = ("layernorm", "relu2", "top_k_renorm_probs", "per_token_quant", "rope")
    assert set(steps) == {f"{kind}-{n}" for n in names for kind in ("onboard", "bench")}
    for name in names:
        assert steps[f"onboard-{name}"][1] == "0", steps[f"onboard-{name}"]
        bench = steps[f"bench-{name}"]
        assert bench[1] == "1" and "no CUDA GPU here" in bench[3], bench
    assert sorted(p.name for p in (out / "home" / "specs").glob("*.toml")) == [
        "apply_rope_pos_ids_inplace.toml", "layernorm.toml", "relu2.toml", "sgl_per_token_quant_fp8.toml",
        "top_k_renorm_probs.toml"]
