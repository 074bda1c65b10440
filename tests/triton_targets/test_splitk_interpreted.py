"""The split-K variant of SGLang's installed fused_moe_kernel, run by Triton's interpreter on CPU
(interpreted_splitk.py, in a process of its own: TRITON_INTERPRET must be set before the kernels are decorated):
every split of every case within the spec's tolerance of the fp64 reference, SGLang's kernel untransformed as
well (the harness agrees with SGLang), and an agent-registered variant that advances one pointer by one tile
instead of SPLIT_K caught at split 2 (the check can see a wrong split)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent


def test_every_split_computes_the_reference(torchvision_shim, tmp_path):
    env = dict(os.environ, TRITON_INTERPRET="1", ASTRA_SGLANG_CACHE=str(tmp_path))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE.parent), env.get("PYTHONPATH")]))  # moe_standins
    done = subprocess.run([sys.executable, str(HERE / "interpreted_splitk.py")], capture_output=True, text=True,
                          env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    worst = json.loads(done.stdout)
    broken = worst.pop("agent one-tile advance (1, 2)")
    assert len([k for k in worst if k.startswith("splitk")]) == 25
    assert len([k for k in worst if k.startswith("verbatim")]) == 3
    assert all(value <= 1.0 for value in worst.values()), {k: v for k, v in worst.items() if v > 1.0}
    assert broken > 10, broken
    assert len(list((tmp_path / "triton-sources").glob("agent-*.py"))) == 1
