"""`launch --record-calls`: a function's distinct calls recorded in every process (through the import hook, as
in a spawned SGLang worker), merged into one file that `onboard --shapes` takes; bounded; never failing a call."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from astra_sglang.cli import main
from astra_sglang.cli import launch
from astra_sglang.patching import hook, recorder
from astra_sglang.patching.recorder import CallRecorder, Recording, out_files
from astra_sglang.patching.runtime import ENV_MECHANISM, ENV_TARGET_MODULES
from astra_sglang.patchset.manifest import Target
from astra_sglang.patchset.store import ENV_PATCHES
from astra_sglang.specs import registry

REPO = Path(__file__).resolve().parents[2]
FAKE = '''
import torch


def act_and_mul(x: torch.Tensor, out: torch.Tensor = None, *, eps: float = 1e-6):
    d = x.shape[-1] // 2
    if out is None:
        out = x.new_empty(*x.shape[:-1], d)
    out.copy_(torch.relu(x[..., :d]) * x[..., d:])
    return out


def other(x):
    return x
'''
ENTRY = "fakerec.layers:act_and_mul"


@pytest.fixture
def fake(tmp_path, monkeypatch):
    mods = tmp_path / "mods"
    (mods / "fakerec").mkdir(parents=True)
    (mods / "fakerec" / "__init__.py").write_text("")
    (mods / "fakerec" / "layers.py").write_text(FAKE)
    monkeypatch.syspath_prepend(str(mods))
    monkeypatch.setenv("ASTRA_SGLANG_HOME", str(tmp_path / "home"))
    registry.reload()
    recorder.reset()
    yield mods
    recorder.reset()
    for name in [m for m in sys.modules if m.startswith(("fakerec", "astra_user_"))]:
        del sys.modules[name]
    registry.reload()


def test_calls_of_every_process_merge_into_one_file_that_onboard_takes(fake, tmp_path):
    """Two fresh interpreters, as SGLang spawns them: the generated sitecustomize wraps the function on import."""
    (tmp_path / "patches").mkdir()  # no patches: recording alone
    out = tmp_path / "rec" / "calls.json"
    env = dict(os.environ, **{ENV_PATCHES: str(tmp_path / "patches"), ENV_MECHANISM: "import-hook",
                              ENV_TARGET_MODULES: "fakerec.layers"},
               **Recording([Target.parse(ENTRY)], out).to_env())
    env["PYTHONPATH"] = os.pathsep.join([str(hook.write_sitecustomize(tmp_path / "hook")), str(fake), str(REPO)])
    script = ("import torch, fakerec.layers as m\n"
              "for t in {tokens}:\n"
              "    x = torch.randn(t, 256, dtype=torch.{dtype})\n"
              "    m.act_and_mul(x); m.act_and_mul(x, torch.empty(t, 128, dtype=x.dtype), eps=1e-5)\n"
              "    m.act_and_mul(x)\n")
    for tokens, dtype in (([16, 3], "bfloat16"), ([3, 7], "float16")):
        done = subprocess.run([sys.executable, "-c", script.format(tokens=tokens, dtype=dtype)], env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
    calls = json.loads(out.read_text())
    seen = {(c["tensors"]["x"]["shape"][0], c["tensors"]["x"]["dtype"], "out" in c["tensors"]) for c in calls}
    assert seen == {(t, d, o) for t, d in ((16, "bfloat16"), (3, "bfloat16"), (3, "float16"), (7, "float16"))
                    for o in (False, True)}
    assert len(calls) == 8  # a repeated call is recorded once
    assert {c["scalars"].get("eps") for c in calls} == {None, 1e-5}
    done = CliRunner().invoke(main, ["onboard", ENTRY, "--shapes", str(out)])
    assert done.exit_code == 0, done.output
    assert "3 recorded shapes" in done.output  # tokens 16, 3 and 7: one dim tuple per size, both dtypes


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shapes", [[(1, 8)], [(5, 6), (5, 6), (33, 6)], [(2, 3, 10), (7, 1, 10)]])
def test_in_process_wrapping_records_distinct_shapes_and_stays_out_of_the_call(fake, tmp_path, monkeypatch, shapes,
                                                                            dtype):
    out = tmp_path / "calls.json"
    for key, value in Recording([Target.parse(ENTRY)], out).to_env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv(ENV_PATCHES, str(tmp_path / "none"))  # the import hook needs a patch config to act
    (tmp_path / "none").mkdir()
    finder = hook.install_import_hook({"fakerec.layers"})
    try:
        import fakerec.layers as layers

        assert getattr(layers.act_and_mul, "__astra_recorder__", None) is not None
        for shape in shapes:
            x = torch.ones(shape, dtype=dtype)
            assert torch.equal(layers.act_and_mul(x), torch.relu(x[..., : shape[-1] // 2]) * x[..., shape[-1] // 2:])
    finally:
        sys.meta_path.remove(finder)
    recorded = [tuple(c["tensors"]["x"]["shape"]) for c in json.loads(out.read_text())]
    assert recorded == list(dict.fromkeys(shapes))
    assert {c["tensors"]["x"]["dtype"] for c in json.loads(out.read_text())} == {str(dtype).removeprefix("torch.")}


def test_recording_is_bounded_and_a_broken_file_stops_it_not_the_call(tmp_path):
    fn = lambda x, scale=1.0: x * scale  # noqa: E731
    rec = CallRecorder(Target.parse("m:f"), tmp_path / "calls.json", limit=3)
    wrapped = rec.wrap(fn)
    for t in range(1, 10):
        wrapped(torch.zeros(t, 4), scale=float(t))
    assert rec.full and len(json.loads((tmp_path / "calls.json").read_text())) == 3
    assert json.loads((tmp_path / "calls.json").read_text())[1] == {
        "tensors": {"x": {"shape": [2, 4], "dtype": "float32"}}, "scalars": {"scale": 2.0},
        "returns": [{"shape": [2, 4], "dtype": "float32"}]}  # what it returned: onboard's output arguments
    bad = CallRecorder(Target.parse("m:f"), tmp_path / "bad.json")
    (tmp_path / "bad.json").write_text("{not json")
    assert torch.equal(bad.wrap(fn)(torch.ones(2)), torch.ones(2)) and bad.full
    assert CallRecorder(Target.parse("m:f"), tmp_path / "none.json").wrap(fn)(3, 2) == 6  # no tensor: nothing
    assert not (tmp_path / "none.json").exists()


@pytest.mark.parametrize("dtype, values", [(torch.int32, [3, 1, 7]), (torch.int64, [0]), (torch.uint8, [9, 2])])
def test_integer_tensors_carry_their_range_and_floats_none(tmp_path, dtype, values):
    rec = CallRecorder(Target.parse("m:f"), tmp_path / "calls.json")
    rec.wrap(lambda probs, top_k: (probs * 2, top_k + 1))(torch.zeros(len(values), 5), torch.tensor(values, dtype=dtype))
    call = json.loads((tmp_path / "calls.json").read_text())[0]
    assert call["tensors"]["top_k"]["range"] == [min(values), max(values)]
    assert "range" not in call["tensors"]["probs"]
    assert [r["dtype"] for r in call["returns"]] == ["float32", str(dtype).removeprefix("torch.")]
    assert call["returns"][1]["range"] == [min(values) + 1, max(values) + 1]


def test_several_functions_get_a_file_each():
    targets = [Target.parse(ENTRY), Target.parse("fakerec.layers:other"), Target.parse("x.y:other")]
    files = out_files(targets, Path("run/calls.json"))
    assert files[targets[0]] == Path("run/calls.act_and_mul.json")
    assert files[targets[1]] == Path("run/calls.fakerec.layers.other.json")
    assert out_files(targets[:1], Path("run/c.json")) == {targets[0]: Path("run/c.json")}


def test_launch_dry_run_sets_the_recording_env(tmp_path, monkeypatch):
    monkeypatch.setenv("ASTRA_SGLANG_HOME", str(tmp_path / "home"))
    monkeypatch.delenv(ENV_PATCHES, raising=False)
    target = "sglang.srt.layers.activation:gelu_and_mul"  # resolved statically in the pinned SGLang
    result = CliRunner().invoke(launch.launch_cmd, ["--mechanism", "import-hook", "--no-build", "--stats-dir",
                                                 str(tmp_path / "st"), "--record-calls", target, "--dry-run", "--",
                                                 "--model-path", "m"])
    assert result.exit_code == 0, result.output
    env = dict(line.split("=", 1) for line in result.output.splitlines() if line.startswith("ASTRA_SGLANG_"))
    assert env[recorder.ENV_RECORD] == target
    assert env[recorder.ENV_RECORD_OUT] == str((tmp_path / "st" / "calls.json").resolve())
    assert "sglang.srt.layers.activation" in env[ENV_TARGET_MODULES].split(",")
    assert f"recording calls of {target} into" in result.output
    bad = CliRunner().invoke(launch.launch_cmd, ["--no-build", "--record-calls", "sglang.srt.layers.activation:nope",
                                              "--dry-run"])
    assert bad.exit_code == 1 and "--record-calls sglang.srt.layers.activation:nope" in bad.output
