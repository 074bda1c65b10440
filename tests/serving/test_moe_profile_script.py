"""benchmarks/gpu/moe_profile.sh on CPU, with stand-ins for what only the GPU machine has (its set-up, the GPU's
name, Triton 3.6.0, `astra-sglang profile`): it profiles A with SGLang's H200 file as the config folder, then B
(the Mixtral A/B's patch) against A's profile, both at batch 1 on the A/B's servers; on another GPU, nothing."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(importlib.util.find_spec("sglang") is None,
                                reason="SGLang's config files come with the sglang package")
STAND_INS = {
    # records each call; writes OUT/profile.json where --out is given, as a profile that ran would
    "bin/astra-sglang": '#!/usr/bin/env bash\n'
                        'echo "SGLANG_MOE_CONFIG_DIR=${SGLANG_MOE_CONFIG_DIR-<unset>} $*" >> "$CALLS"\n'
                        'while [ $# -gt 0 ]; do [ "$1" = --out ] && mkdir -p "$2" && echo {} > "$2/profile.json"; '
                        'shift; done\n',
    "bin/python3": '#!/usr/bin/env bash\n'
                   'if [ "$1" = -c ] && [[ "$2" == *get_device_name* ]]; then echo "$FAKE_GPU"; exit 0; fi\n'
                   f'exec {sys.executable} "$@"\n',
    "bin/pgrep": "#!/usr/bin/env bash\nexit 1\n",
    "repo/benchmarks/gpu/setup.sh": "",
    "repo/benchmarks/make_moe_model.py": "",
    "fake/triton/__init__.py": '__version__ = "3.6.0"\n',
}


def _run(tmp_path: Path, gpu: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    for rel, text in STAND_INS.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(0o755)
    for rel in ("benchmarks/gpu/moe_profile.sh", "benchmarks/gpu/server_args.sh", "benchmarks/moe_ab_configs.py",
                "benchmarks/results"):
        (tmp_path / "repo" / rel).symlink_to(ROOT / rel)
    env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path), "FAKE_GPU": gpu,
           "PYTHONPATH": f"{tmp_path / 'fake'}{os.pathsep}{ROOT}", "MOE_CFG": str(tmp_path / "cfg"),
           "CALLS": str(tmp_path / "calls")}
    done = subprocess.run(["bash", "benchmarks/gpu/moe_profile.sh", str(tmp_path / "out")], cwd=tmp_path / "repo",
                          env=env, capture_output=True, text=True, timeout=300)
    calls = tmp_path / "calls"
    return done, calls.read_text().splitlines() if calls.is_file() else []


SERVER = ("-- --model-path /tmp/model-mixtral-8x7b-tp2-32 --load-format dummy --attention-backend triton "
          "--sampling-backend pytorch --grammar-backend none --cuda-graph-max-bs-decode 64 --moe-runner-backend triton "
          "--cuda-graph-max-bs-decode 2 --disable-prefill-cuda-graph")
"""The Mixtral A/B's servers exactly (its plan.json's server arguments), so the profile times what it served."""
LOAD = "--workload decode --concurrency 1 --steps 30 --port 30123 --health-timeout 300"


def test_the_servers_are_the_committed_ab_servers():
    plan = json.loads((ROOT / "benchmarks" / "results" / "2026-11-28-h200" / "serving" / "mixtral-ab" / "plan.json")
                      .read_text())
    assert SERVER == " ".join(["--", "--model-path", plan["model_path"], "--load-format", plan["load_format"],
                               *plan["server_args"]])


def test_a_then_b_against_a_at_batch_1_on_the_ab_servers(tmp_path):
    done, calls = _run(tmp_path, "NVIDIA H200")
    assert done.returncode == 0, done.stdout + done.stderr
    a_dir = f"SGLANG_MOE_CONFIG_DIR={tmp_path / 'cfg' / 'baseline'}"
    assert calls == [
        f"{a_dir} profile {LOAD} --out {tmp_path / 'out' / 'base'} {SERVER}",
        f"{a_dir} profile --patched --patches {tmp_path / 'cfg' / 'patches'} --compare "
        f"{tmp_path / 'out' / 'base' / 'profile.json'} {LOAD} --out {tmp_path / 'out' / 'patched'} {SERVER}"]
    assert (tmp_path / "cfg" / "patches" / "fused_moe" / "manifest.json").is_file()  # the A/B's own B
    assert (tmp_path / "out" / "console.txt").is_file()


def test_another_gpu_profiles_nothing(tmp_path):
    done, calls = _run(tmp_path, "NVIDIA H100 80GB HBM3")
    assert done.returncode != 0 and calls == []
