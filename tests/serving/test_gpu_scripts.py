"""The serving GPU scripts checked on CPU before any GPU time goes to them: bash syntax, every option their `ab`
and helper commands pass exists, and the A/A offset probe's figures from the committed decode trace."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from astra_sglang.cli.ab import ab

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = [ROOT / "benchmarks" / "gpu" / name for name in ("ab_common.sh", "ab_design.sh", "ab_runs.sh")]


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.name for s in SCRIPTS])
def test_bash_syntax(script):
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0


def _ab_invocations(text: str) -> list[str]:
    """Each `astra-sglang ab ...` command up to its ` -- ` (continuation lines joined)."""
    joined = text.replace("\\\n", " ")
    return [m.split(" -- ")[0] for m in re.findall(r"astra-sglang ab (.*)", joined)]


@pytest.mark.parametrize("script", SCRIPTS[1:], ids=[s.name for s in SCRIPTS[1:]])
def test_every_ab_option_the_scripts_pass_exists(script):
    known = {opt for p in ab.params for opt in getattr(p, "opts", [])}
    text = script.read_text()
    calls = _ab_invocations(text)
    assert calls, "no ab command found"
    used = {flag for call in calls for flag in re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", call)}
    for array in re.findall(r"(?:CLIENT|PLACE)=\((.*?)\)", text, flags=re.S):  # options kept in bash arrays
        used |= set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", array))
    assert used and used <= known, sorted(used - known)


def test_the_offset_probe_reads_decode_figures_from_a_trace():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import aa_offset

    figures = aa_offset.decode_figures([ROOT / "tests" / "fixtures" / "profile" / "decode.trace.json.gz"])
    assert figures["steps"] == 4 and figures["tokens_per_step"] == 64
    assert figures["gpu_us_per_step"] > 0 and figures["wall_median_us"] == pytest.approx(970.5, abs=30)


def test_the_mixtral_arms_sglang_nearest_gpu_file_and_the_tuned_patch(tmp_path):
    import importlib.util

    if importlib.util.find_spec("sglang") is None:
        pytest.skip("SGLang's config files come with the sglang package")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import moe_ab_configs

    from astra_sglang.patchset.store import PatchStore

    assert moe_ab_configs.main([str(tmp_path), "--device", "NVIDIA H100 80GB HBM3", "--triton", "3.6.0"]) == 0
    name = "E=8,N=14336,device_name=NVIDIA_H100_80GB_HBM3.json"
    borrowed = tmp_path / "baseline" / "configs" / "triton_3_6_0" / name
    shipped = moe_ab_configs.nearest_file(tmp_path / "baseline", 8, 14336, "NVIDIA_H200")
    assert borrowed.read_text() == shipped.read_text()  # SGLang's H200 file, under the H100's name
    entry = PatchStore(tmp_path / "patches").get("fused_moe")
    assert entry.manifest.kind == "triton-config" and entry.manifest.configs[0].tuned == [1, 4, 16, 64, 256, 1024, 4096]
    assert (entry.folder / entry.manifest.configs[0].path).name == name
