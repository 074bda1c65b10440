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
    common = (ROOT / "benchmarks" / "gpu" / "ab_common.sh").read_text()
    for array in re.findall(r"(?:CLIENT|PLACE)=\((.*?)\)", text + common, flags=re.S):  # options in bash arrays
        used |= set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", array))
    used |= set(re.findall(r"echo (--[a-z][a-z-]*)", common))  # the options its helpers hand to ab
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


def test_the_h200_mixtral_arms_sglang_own_file_and_our_two_tiers_runs_merged(tmp_path):
    """On an H200: A reads SGLang's own TP2-shard file; B is one file holding both committed tiers runs' tuned
    keys (batch 1 from one run, 64 from the other), SGLang's picks elsewhere, and both runs' figures."""
    import importlib.util

    if importlib.util.find_spec("sglang") is None:
        pytest.skip("SGLang's config files come with the sglang package")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import moe_ab_configs

    from astra_sglang.patchset.store import PatchStore
    from astra_sglang.triton.moe.configs import read

    assert moe_ab_configs.main([str(tmp_path), "--device", "NVIDIA H200", "--triton", "3.6.0"]) == 0
    name = "E=8,N=7168,device_name=NVIDIA_H200.json"
    shipped = read(tmp_path / "baseline" / "configs" / "triton_3_1_0" / name)
    assert read(tmp_path / "baseline" / "configs" / "triton_3_6_0" / name) == shipped
    entry = PatchStore(tmp_path / "patches").get("fused_moe")
    assert entry.manifest.configs[0].tuned == [1, 64]
    assert sorted((m.shape[0], round(m.speedup, 3)) for m in entry.manifest.measured) == [(1, 1.044), (64, 1.025)]
    ours = read(entry.folder / entry.manifest.configs[0].path)
    runs = [read(next((run / "patches").rglob(name))) for run in moe_ab_configs.H200_RUNS]
    assert ours[1] == runs[0][1] != shipped[1] and ours[64] == runs[1][64] != shipped[64]
    assert {k: v for k, v in ours.items() if k not in (1, 64)} == {k: v for k, v in shipped.items() if k not in (1, 64)}


@pytest.mark.parametrize("shape, device, tuned_on", [
    ([], "NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3 and NVIDIA H200"),  # the Mixtral callers' command
    (["--shape", "dsv2lite"], "NVIDIA H100 80GB HBM3", "NVIDIA H200"),
    (["--shape", "dsv2lite"], "NVIDIA A100-SXM4-80GB", "NVIDIA H200"),
], ids=["mixtral-a100", "dsv2lite-h100", "dsv2lite-a100"])
def test_the_arms_are_refused_on_a_gpu_the_configs_were_not_tuned_on(tmp_path, capsys, shape, device, tuned_on):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import moe_ab_configs

    assert moe_ab_configs.main([str(tmp_path / "out"), "--device", device, "--triton", "3.6.0", *shape]) == 2
    said = capsys.readouterr().err.strip()
    assert said == (f"moe_ab_configs: B's configs were tuned on {tuned_on}, not on {device}: no A/B of our tuning on "
                    "this GPU")
    assert not (tmp_path / "out").exists()


def _common_functions(*names: str) -> str:
    """The bash text of ab_common.sh's helper functions `names` (the file itself sources the GPU set-up)."""
    text = (ROOT / "benchmarks" / "gpu" / "ab_common.sh").read_text()
    return "\n".join(re.search(rf"^{name}\(\) {{[^\n]*}}$|^{name}\(\) {{.*?^}}$", text, flags=re.S | re.M)[0]
                     for name in names)


def test_servers_start_one_after_the_other_until_a_period_of_the_model_has_run(tmp_path):
    """A fresh machine's first period staggers its starts (shared JIT caches); once a period of that model has
    completed on the machine, later stages and calls pass --no-stagger; another model is staggered again. A run
    folder resumed from an earlier call (its periods ran on that call's machine) marks nothing until this call
    completes a period of it."""
    functions = _common_functions("started_mark", "began_mark", "stagger_opts", "mark_started", "resume_from")
    (tmp_path / "runs" / "aa").mkdir(parents=True)
    (tmp_path / "runs" / "aa" / "plan.json").write_text("{}")
    (tmp_path / "runs" / "aa" / "starts.jsonl").write_text('{"period": 1}\n')
    out, run = tmp_path / "out", tmp_path / "out" / "aa"
    script = f"""{functions}
        echo "fresh:[$(stagger_opts /tmp/model-weights)]"
        resume_from aa
        mark_started /tmp/model-weights {run}
        echo "resumed, no period:[$(stagger_opts /tmp/model-weights)]"
        sleep 0.02; echo '{{"period": 2}}' >> {run}/starts.jsonl
        mark_started /tmp/model-weights {run}
        echo "after a period:[$(stagger_opts /tmp/model-weights)] other:[$(stagger_opts /tmp/model-mixtral-8x7b)]"
    """
    done = subprocess.run(["bash", "-euc", script], capture_output=True, text=True,
                          env={"AB_MARKS": str(tmp_path), "PATH": "/usr/bin:/bin", "OUT": str(out),
                               "RUNS": str(tmp_path / "runs")})
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["fresh:[]", f"== aa: continuing the run from {tmp_path}/runs/aa",
                                        "resumed, no period:[]", "after a period:[--no-stagger] other:[]"]


def test_the_scripts_client_keeps_the_h200s_windows_above_12_s():
    """The client ab_common.sh pins, against the 2026-11-27 H200 A/A's fastest step (its rows in
    tests/fixtures/serving): a full batch emitting a token per request every min(mean ITL) ms."""
    import json

    text = (ROOT / "benchmarks" / "gpu" / "ab_common.sh").read_text()
    prompts = int(re.search(r"PROMPTS=\$\{PROMPTS:-(\d+)\}", text)[1])
    out_len = int(re.search(r"--output-len \"\$\{OUT_LEN:-(\d+)\}\"", text)[1])
    conc = int(re.search(r"--concurrency \"\$\{CONC:-(\d+)\}\"", text)[1])
    h200 = json.loads((ROOT / "tests" / "fixtures" / "serving" / "h200-aa-short-rounds.json").read_text())
    assert conc == h200["bench_line"]["max_concurrency"]  # the concurrency whose rate was measured
    fastest_itl_s = min(r["metrics"]["mean_itl_ms"] for r in h200["rows"]) / 1000
    best_rate = max(r["metrics"]["output_throughput"] for r in h200["rows"])
    assert prompts * out_len / (conc / fastest_itl_s) >= 12.0  # 12.6 s at 20.8k tok/s: the 10 s minimum and 20%
    assert prompts * out_len / best_rate >= 15.0  # 16.4 s at the best round's 16.0k tok/s
