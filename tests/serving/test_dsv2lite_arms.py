"""The DeepSeek-V2-Lite serving A/B against SGLang's own tuner: its arms (benchmarks/moe_ab_configs.py --shape
dsv2lite) read from the committed bar and tiers runs, and ab_runs.sh's dsv2lite stages run on CPU with stand-ins
for what only the GPU machine has (its set-up, the GPU's name, Triton 3.6.0, `astra-sglang ab`)."""
from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from astra_sglang.patchset.store import PatchStore
from astra_sglang.triton.moe.configs import read
from astra_sglang.triton.moe.space import MoeConfig

ROOT = Path(__file__).resolve().parents[2]
BAR = ROOT / "benchmarks" / "results" / "2026-11-27-h200" / "moe-bar"
NAME = "E=64,N=1408,device_name=NVIDIA_H200.json"
needs_sglang = pytest.mark.skipif(importlib.util.find_spec("sglang") is None,
                                  reason="SGLang's config files come with the sglang package")


def _script():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import moe_ab_configs

    return moe_ab_configs


def _rows(path: Path, kind: str) -> list[dict]:
    return [row for row in map(json.loads, path.read_text().splitlines()) if row["kind"] == kind]


@pytest.fixture(scope="module")
def arms(tmp_path_factory):
    """Both arms as an H200 under Triton 3.6.0 gets them: (out, A's file, B's file, B's patch entry)."""
    out = tmp_path_factory.mktemp("arms")
    assert _script().main([str(out), "--device", "NVIDIA H200", "--shape", "dsv2lite", "--triton", "3.6.0"]) == 0
    entry = PatchStore(out / "patches").get("fused_moe")
    return out, read(out / "baseline" / "configs" / "triton_3_6_0" / NAME), \
        read(entry.folder / entry.manifest.configs[0].path), entry


@needs_sglang
@pytest.mark.parametrize("tokens, figure", [(1, 1.052), (64, 0.997)])
def test_a_holds_sglang_tuners_best_and_b_ours_as_the_strict_evaluator_judged_them(arms, tokens, figure):
    """A's key: the best of SGLang's tuner in the bar; B's: the file our tiers run at that batch size wrote. The
    strict evaluator's ours-vs-tuner row of that run timed exactly these two, at the figure the docstring cites."""
    _, a, b, _ = arms
    assert a[tokens] == next(r["best"] for r in _rows(BAR / "deepseek-v2-lite-1-64" / "bar.jsonl", "tuner")
                             if r["tokens"] == tokens)
    run = BAR / f"ours-deepseek-v2-lite-{tokens}"
    assert b[tokens] == read(next((run / "tiers" / "strict").rglob(NAME)))[tokens]
    judged = next(r for r in _rows(run / "bar" / "bar.jsonl", "comparison")
                  if r["comparison"] == "ours-vs-tuner" and r["tokens"] == tokens)
    codes = (MoeConfig.from_sglang(b[tokens]).code(), MoeConfig.from_sglang(a[tokens]).code())
    assert (judged["candidate"], judged["baseline"]) == codes
    assert round(judged["speedup"], 3) == figure and f"{figure:.3f}x" in _script().__doc__


@needs_sglang
def test_the_arms_hold_the_same_two_keys_and_differ_only_at_batch_1(arms):
    from astra_sglang.triton.moe.configs import CONFIG_MODULE, package_dir

    out, a, b, entry = arms
    assert sorted(a) == sorted(b) == [1, 64]  # any other batch size reads the same nearest key in both arms
    assert [k for k in a if a[k] != b[k]] == [1]  # at 64 both tuners chose one config
    assert entry.manifest.kind == "triton-config" and entry.manifest.configs[0].tuned == [1, 64]
    assert entry.manifest.configs[0].path == f"configs/triton_3_6_0/{NAME}"
    shipped = (package_dir() / CONFIG_MODULE).parent / "configs"
    ours = out / "baseline" / "configs"
    assert not list(shipped.glob(f"triton_*/{NAME}"))  # SGLang ships none: A's file adds to its tree, replaces nothing
    assert {p.relative_to(ours) for p in ours.rglob("*.json")} == \
        {p.relative_to(shipped) for p in shipped.rglob("*.json")} | {Path("triton_3_6_0") / NAME}


def test_a_bar_run_of_another_shape_is_refused_in_one_line(tmp_path, monkeypatch, capsys):
    script = _script()
    wrong = script.tuner_arms(BAR / "qwen3-30b-a3b-1-64", "deepseek-v2-lite", script.DSV2_RUNS)
    monkeypatch.setitem(script.ARMS["dsv2lite"], "NVIDIA H200", wrong)
    assert script.main([str(tmp_path / "out"), "--device", "NVIDIA H200", "--shape", "dsv2lite", "--triton", "3.6.0",
                        "--sglang-configs", str(tmp_path / "sglang")]) == 1
    said = capsys.readouterr().err.strip()
    assert "\n" not in said and said.startswith("moe_ab_configs: the bar run in ") and "E=128 N=768" in said


@needs_sglang
@pytest.mark.parametrize("shape", ["mixtral", "dsv2lite"])
def test_b_tuned_under_another_triton_is_refused_in_one_line(tmp_path, capsys, shape):
    """SGLang reads the running Triton's folder first: B's triton_3_6_0 file under Triton 3.5.0 would never serve."""
    assert _script().main([str(tmp_path), "--device", "NVIDIA H200", "--shape", shape, "--triton", "3.5.0"]) == 1
    assert capsys.readouterr().err.strip() == ("moe_ab_configs: B's files are for triton_3_6_0, this Triton is "
                                               "3.5.0: SGLang would read A's triton_3_5_0 file in both arms")


STAND_INS = {
    "bin/astra-sglang": '#!/usr/bin/env bash\n'
                        'echo "SGLANG_MOE_CONFIG_DIR=${SGLANG_MOE_CONFIG_DIR-<unset>} $*" >> "$AB_CALLS"\n',
    "bin/python3": '#!/usr/bin/env bash\n'
                   'if [ "$1" = -c ] && [[ "$2" == *get_device_name* ]]; then echo "$FAKE_GPU"; exit 0; fi\n'
                   f'exec {sys.executable} "$@"\n',
    "bin/pgrep": "#!/usr/bin/env bash\nexit 1\n",  # no server of the script's ports to stop here
    "repo/benchmarks/gpu/setup.sh": "",
    "repo/benchmarks/make_weights.py": "",
    "repo/benchmarks/make_moe_model.py": "",
    "fake/triton/__init__.py": '__version__ = "3.6.0"\n',  # the GPU machine's Triton
}
"""What the GPU machine gives ab_runs.sh, on CPU: the recorded `ab` call, the GPU's name, no weights to make."""


def _ab_runs(tmp_path: Path, stages: str, gpu: str, out: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    for rel, text in STAND_INS.items():
        path = tmp_path / rel
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            path.chmod(0o755)
    for rel in ("benchmarks/gpu/ab_runs.sh", "benchmarks/gpu/ab_common.sh", "benchmarks/gpu/server_args.sh",
                "benchmarks/moe_ab_configs.py",
                "benchmarks/results"):
        if not (tmp_path / "repo" / rel).exists():
            (tmp_path / "repo" / rel).symlink_to(ROOT / rel)
    calls = tmp_path / f"{out}.calls"
    env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path), "OUT": str(tmp_path / out),
           "PYTHONPATH": f"{tmp_path / 'fake'}{os.pathsep}{ROOT}", "STAGES": stages, "FAKE_GPU": gpu,
           "DSV2_CFG": str(tmp_path / "cfg"), "AB_MARKS": str(tmp_path), "AB_CALLS": str(calls)}
    done = subprocess.run(["bash", "benchmarks/gpu/ab_runs.sh"], cwd=tmp_path / "repo", env=env, capture_output=True,
                          text=True, timeout=300)
    return done, calls.read_text().splitlines() if calls.is_file() else []


@needs_sglang
@pytest.mark.parametrize("stage, a_dir, arm", [
    ("dsv2lite-tuned", "cfg/baseline", "--patches {tmp}/cfg/patches"),
    ("dsv2lite-aa", "cfg/baseline", "--control"),
    ("dsv2lite", None, "--patches benchmarks/results/2026-11-27-h200/moe-bar/ours-deepseek-v2-lite-1/tiers/strict/"
                       "deepseek-v2-lite-1/patches"),
])
def test_the_dsv2lite_stages_serve_their_arms_one_request_at_a_time(tmp_path, stage, a_dir, arm):
    """Each stage: one `ab` call with A's folder as SGLang's config folder (none: SGLang's own), B's arm, the
    one-request client and servers; a second call (a resumed run, another OUT) gives the same B path."""
    runs = [_ab_runs(tmp_path, stage, "NVIDIA H200", out) for out in ("out1", "out2")]
    for (done, calls), out in zip(runs, ("out1", "out2")):
        assert done.returncode == 0, done.stdout + done.stderr
        assert len(calls) == 1, done.stdout
        env, _, args = calls[0].partition(" ")
        assert env == f"SGLANG_MOE_CONFIG_DIR={tmp_path / a_dir if a_dir else '<unset>'}"
        assert args.startswith("ab --model-path /tmp/model-dsv2lite-experts-26 --load-format dummy")
        assert f" {arm.format(tmp=tmp_path)} " in args and f"--out {tmp_path / out / stage} " in args
        assert " --concurrency 1 " in args and " --num-prompts 48 " in args
        assert args.endswith("--moe-runner-backend triton --cuda-graph-max-bs-decode 2 --disable-prefill-cuda-graph")
        if a_dir:  # the record beside the run: the folders A and B were served from
            assert read(tmp_path / out / f"moe-configs-{stage}" / "baseline" / "configs" / "triton_3_6_0" / NAME) \
                == read(tmp_path / "cfg" / "baseline" / "configs" / "triton_3_6_0" / NAME)
    first, second = (re.sub(r"--stop-after \d+", "", calls[0]) for _, calls in runs)
    assert first.replace("out1", "out2") == second  # only --out (and the time left) differ between the calls


@needs_sglang
def test_the_dsv2lite_stages_are_not_run_on_a_gpu_b_was_not_tuned_on(tmp_path):
    done, calls = _ab_runs(tmp_path, "dsv2lite dsv2lite-tuned dsv2lite-aa", "NVIDIA H100 80GB HBM3", "out")
    assert done.returncode == 0 and calls == []
    said = [line for line in done.stdout.splitlines() if line.endswith(": not run")]
    assert said == [f"== {s}: B's configs were tuned on an NVIDIA H200, this is an NVIDIA H100 80GB HBM3: not run"
                    for s in ("dsv2lite", "dsv2lite-tuned", "dsv2lite-aa")]
