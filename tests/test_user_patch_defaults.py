"""The patch for OP is the user folder's over the shipped one, in `bench OP`'s default candidate and in the
built-in tuner's start kernel, as `launch` layers them: a user patch present wins (and the output says so),
absent the shipped patch is used, and an op that only the user folder has (a spec and a patch `onboard` /
`optimize` wrote) needs nothing shipped. Evaluation and tuning are faked (no GPU here): the tests check what
is asked for and what is printed."""
from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest
from click.testing import CliRunner

from astra_sglang.baselines import defaults
from astra_sglang.cli import optimize as agents_cli
from astra_sglang.cli import main
from astra_sglang.harness import isolate
from astra_sglang.harness.records import BuildInfo, EvalResult
from astra_sglang.patchset.store import ENV_PATCHES
from astra_sglang.paths import ENV_HOME, patches_dir, specs_dir

USER_OP = "my_act_and_mul"
"""An op with a user spec and a user patch only (a copy of silu_and_mul's spec under another name)."""
KNOBBED = {"silu_and_mul": "silu_and_mul", "rmsnorm": "rmsnorm", "gemma_rmsnorm": "rmsnorm",
           USER_OP: "silu_and_mul"}
"""op -> the shipped kernel file its user patch is a copy of (so it declares the same knobs)."""
DEFINES = {"gemma_rmsnorm": {"ASTRA_GEMMA": "1"}}


@pytest.fixture
def home(tmp_path, monkeypatch):
    """An empty user folder (its path set here, so the CLI's --home writing the variable is undone too)."""
    monkeypatch.setenv(ENV_HOME, str(tmp_path / "home"))
    monkeypatch.setenv("ASTRA_SGLANG_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(ENV_PATCHES, raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    spec = (specs_dir() / "silu_and_mul.toml").read_text().replace('name = "silu_and_mul"', f'name = "{USER_OP}"')
    (tmp_path / "home" / "specs").mkdir(parents=True)
    (tmp_path / "home" / "specs" / f"{USER_OP}.toml").write_text(spec)
    return tmp_path / "home"


def user_patch(home: Path, op: str, knobs: bool = True) -> Path:
    """HOME/patches/OP as `optimize` writes one: kernel.cu (marked as the user's) and its manifest."""
    folder = home / "patches" / op
    folder.mkdir(parents=True)
    body = (patches_dir() / KNOBBED[op] / "kernel.cu").read_text() if knobs else "// no knobs\n"
    (folder / "kernel.cu").write_text(f"// the user's {op}\n{body}")
    (folder / "manifest.json").write_text(json.dumps({
        "op": op, "dtypes": ["bfloat16", "float16"], "defines": DEFINES.get(op, {}), "enabled": True,
        "provenance": {"method": "tuner", "notes": "a user run"}}))
    return folder


def bench(home: Path, op: str, monkeypatch):
    seen = []

    def fake_evaluate(req):
        seen.append(req)
        return EvalResult(kernel=req.kernel, candidate=req.candidate.name(), baseline=req.baseline.name(), ok=True,
                          stage="done", build=BuildInfo(ok=True, seconds=0.1), gpu="fake GPU", shapes=[])

    monkeypatch.setattr(isolate, "evaluate", fake_evaluate)
    monkeypatch.setattr(defaults, "missing_for", lambda name: None)
    monkeypatch.setattr("astra_sglang.cli.bench._has_gpu", lambda: True)
    out = CliRunner().invoke(main, ["--home", str(home), "bench", op, "--shapes", "quick",
                                    "--out", str(home.parent / "r.jsonl")])
    assert out.exit_code == 0, out.output
    return out.output.splitlines()[0], seen[-1]


def tuner_start(home: Path, op: str, monkeypatch) -> tuple[str, str]:
    """`optimize OP --tuner` with the tuner faked: (its output, the start kernel's text)."""
    starts = []

    def run_tuner(spec, start, rounds, run_dir, evaluator, echo=None, baseline=None, batch=None):
        starts.append(Path(start))
        return None

    monkeypatch.setitem(sys.modules, "astra_sglang.optimize.tuner.cuda_tune",
                        types.SimpleNamespace(run_tuner=run_tuner))
    monkeypatch.setattr(agents_cli, "harness_evaluator", lambda: lambda req: None)
    out = CliRunner().invoke(main, ["--home", str(home), "optimize", op, "--tuner", "--rounds", "1", "--gpus", "none",
                                    "--out", str(home.parent / "run")])
    assert out.exit_code == 0, out.output
    return out.output, starts[0].read_text()


@pytest.mark.parametrize("op", ["silu_and_mul", "rmsnorm", "gemma_rmsnorm"])
def test_bench_default_is_the_user_patch_over_the_shipped_one(home, op, monkeypatch):
    folder = user_patch(home, op)
    first, req = bench(home, op, monkeypatch)
    cand = req.candidate
    assert Path(cand.path) == (folder / "kernel.cu").resolve() and cand.label == f"user:patches/{op}"
    assert cand.defines == DEFINES.get(op, {})
    assert first.startswith(f"{op}: user:patches/{op} (the user folder's patch {folder}, over the shipped one) vs ")


@pytest.mark.parametrize("op", ["silu_and_mul", "gemma_rmsnorm"])
def test_bench_default_without_a_user_patch_is_the_shipped_one(home, op, monkeypatch):
    first, req = bench(home, op, monkeypatch)
    cand = req.candidate
    shipped = json.loads((patches_dir() / op / "manifest.json").read_text())
    assert Path(cand.path) == (patches_dir() / op / shipped["kernel"]).resolve() and cand.label == f"patches/{op}"
    assert first.startswith(f"{op}: patches/{op} (the shipped patch") and "user folder" not in first


def test_bench_default_of_a_user_op_with_no_shipped_patch(home, monkeypatch):
    folder = user_patch(home, USER_OP)
    first, req = bench(home, USER_OP, monkeypatch)
    cand = req.candidate
    assert Path(cand.path) == (folder / "kernel.cu").resolve() and cand.label == f"user:patches/{USER_OP}"
    # no baseline of the package's for it: the call site its spec was written from (`onboard`)
    target = "py:sglang.srt.layers.activation:silu_and_mul"
    assert req.baseline.path == target
    assert first == (f"{USER_OP}: user:patches/{USER_OP} (the user folder's patch {folder}) vs {target} "
                     "(SGLang's own op, the user spec's call site)")


@pytest.mark.parametrize("op", ["silu_and_mul", "rmsnorm", "gemma_rmsnorm", USER_OP])
def test_tuner_starts_from_the_user_patch(home, op, monkeypatch):
    folder = user_patch(home, op)
    output, start = tuner_start(home, op, monkeypatch)
    assert f"// the user's {op}\n" in start and "astra:knob" in start
    assert all(f"#define {k} {v}\n" in start for k, v in DEFINES.get(op, {}).items())
    assert f"tuning from the user folder's patch {folder}" in output


@pytest.mark.parametrize("op", ["silu_and_mul", "gemma_rmsnorm"])
def test_tuner_without_a_user_patch_starts_from_the_shipped_one(home, op, monkeypatch):
    output, start = tuner_start(home, op, monkeypatch)
    shipped = json.loads((patches_dir() / op / "manifest.json").read_text())
    assert start.endswith((patches_dir() / op / shipped["kernel"]).read_text()) and "the user's" not in start
    assert "tuning from the shipped patch" in output


def test_a_user_patch_without_knobs_is_benched_but_the_tuner_starts_below_it(home, monkeypatch):
    folder = user_patch(home, "silu_and_mul", knobs=False)
    _, req = bench(home, "silu_and_mul", monkeypatch)
    cand = req.candidate
    assert Path(cand.path) == (folder / "kernel.cu").resolve()
    output, start = tuner_start(home, "silu_and_mul", monkeypatch)
    assert start == (patches_dir() / "silu_and_mul" / "kernel.cu").read_text()
    assert f"the user folder's patch {folder}, over the shipped one declares no `// astra:knob`" in output
    assert "tuning from the shipped patch" in output
