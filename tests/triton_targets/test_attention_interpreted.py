"""SGLang's real Triton attention kernels with the launch patch's configs, on CPU: Triton's interpreter runs the
kernels SGLang's launchers launch (interpreted_attention.py, in a process of its own, since TRITON_INTERPRET
must be set before the kernels are decorated). Each tuned config must give SGLang's result within the spec's
fp16 tolerance, so a config whose grid or block sizes were put together wrongly fails here, not first on a GPU;
the control (a grid left at SGLang's block rows under a smaller BLOCK_M) must fail."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent


def test_tuned_configs_compute_what_sglangs_pick_computes(torchvision_shim):
    env = dict(os.environ, TRITON_INTERPRET="1")
    paths = [str(torchvision_shim)] if torchvision_shim else []
    env["PYTHONPATH"] = os.pathsep.join(paths + [env["PYTHONPATH"]] if env.get("PYTHONPATH") else paths)
    done = subprocess.run([sys.executable, str(HERE / "interpreted_attention.py")], capture_output=True, text=True,
                          env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    worst, counts = result["worst"], result["counts"]
    control = worst.pop("extend broken-grid 37x20")
    assert len(worst) == 8 and all(value <= 1.0 for value in worst.values()), worst
    assert control > 10, control  # rows 16-36 never written: the check can see a wrong grid
    assert counts == {"decode": [2, 2], "extend": [2, 2]}  # every patched launch took its table's config
