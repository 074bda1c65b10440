"""`astra-sglang onboard MODULE:FUNC --shapes calls.json`: a spec in the user folder from a small fake SGLang
module (a function, a CustomOp-like class whose forward_native is the reference, a function with none, a CUDA-only
function), checked on CPU; and docs/specs.md's example on the installed SGLang, whose module does not import on
CPU (read from source). tests/onboard/ covers ops of flashinfer and sgl_kernel."""
from __future__ import annotations

import json
import sys
import tomllib

import pytest
from click.testing import CliRunner

from astra_sglang.cli import main
from astra_sglang.paths import ENV_HOME
from astra_sglang.specs import registry

FAKE = '''
import torch


class CustomOp(torch.nn.Module):
    pass


def act_and_mul(x: torch.Tensor, out: torch.Tensor = None, *, enable_pdl: bool = False):
    d = x.shape[-1] // 2
    if out is None:
        out = x.new_empty(*x.shape[:-1], d)
    out.copy_(torch.relu(x[..., :d]) * x[..., d:])
    return out


class ActAndMul(CustomOp):
    def forward_native(self, x):
        d = x.shape[-1] // 2
        return torch.relu(x[..., :d]) * x[..., d:]

    def forward_cuda(self, x):
        return act_and_mul(x)


def scale_rows(x, scale, *, eps: float = 1e-6):
    return x * scale[:, None]


def cuda_only(x, out):
    raise RuntimeError("needs CUDA")
'''


def _call(**tensors):
    return {"tensors": {k: {"shape": list(s), "dtype": d} for k, (s, d) in tensors.items()}}


@pytest.fixture
def env(tmp_path, monkeypatch):
    (tmp_path / "mods" / "fakesgl").mkdir(parents=True)
    (tmp_path / "mods" / "fakesgl" / "__init__.py").write_text("")
    (tmp_path / "mods" / "fakesgl" / "layers.py").write_text(FAKE)
    monkeypatch.syspath_prepend(str(tmp_path / "mods"))
    monkeypatch.setenv(ENV_HOME, str(tmp_path / "home"))
    registry.reload()
    yield tmp_path
    for name in [m for m in sys.modules if m.startswith(("fakesgl", "astra_user_"))]:
        del sys.modules[name]
    registry.reload()


def _write(path, calls):
    path.write_text(json.dumps(calls))
    return str(path)


@pytest.mark.parametrize("tokens", [[16, 3], [1], [7, 5, 2048]])
def test_function_with_a_native_class_becomes_a_checked_spec(env, tokens):
    calls = _write(env / "calls.json", [_call(x=((t, 8192), "bfloat16"), out=((t, 4096), "bfloat16")) for t in tokens])
    out = CliRunner().invoke(main, ["onboard", "fakesgl.layers:act_and_mul", "--shapes", calls,
                                    "--model", "llama-3-8b"])
    assert out.exit_code == 0, out.output
    path = env / "home" / "specs" / "act_and_mul.toml"
    assert f"wrote {path}" in out.output and "ActAndMul.forward_native" in out.output
    assert "ok: reference runs" in out.output and "target fakesgl.layers:act_and_mul" in out.output
    assert f"the op runs at {min(tokens)}x4096 on CPU, agreeing with the reference" in out.output
    spec = tomllib.loads(path.read_text())
    assert spec["dims"] == ["tokens", "hidden"] and spec["shapes"]["model_dims"] == {"hidden": "hidden"}
    args = {a["name"]: a for a in spec["arguments"]}
    assert args["x"]["shape"] == ["tokens", "2*hidden"] and args["out"]["role"] == "out"
    assert "enable_pdl" not in args  # a launch hint the patched op ignores
    assert spec["dtypes"] == ["bfloat16", "float16", "float32"]  # probed: the op runs in each on CPU
    assert spec["shapes"]["quick"] == [[t, 4096] for t in tokens]
    assert spec["reference"] == "astra_user_act_and_mul:reference" and spec["reference_dtype"] == "float64"
    assert (env / "home" / "ops" / "astra_user_act_and_mul.py").is_file()
    listing = CliRunner().invoke(main, ["kernels", "act_and_mul"])
    assert listing.exit_code == 0 and "act_and_mul" in listing.output


def test_op_without_a_native_version_is_its_own_reference_on_the_gpu(env):
    calls = _write(env / "c.json", [_call(x=((5, 24), "float16"), scale=((5,), "float32"))])
    out = CliRunner().invoke(main, ["onboard", "fakesgl.layers:scale_rows", "--shapes", calls, "--name", "rows"])
    assert out.exit_code == 0, out.output
    spec = tomllib.loads((env / "home" / "specs" / "rows.toml").read_text())
    assert "the op itself on the GPU" in out.output and spec["name"] == "rows"
    assert spec["reference"] == "astra_user_rows:op" and spec["reference_dtype"] == "op"
    args = {a["name"]: a for a in spec["arguments"]}
    assert args["scale"]["dtype"] == "float32" and "dtype" not in args["x"] and args["eps"]["default"] == 1e-6
    assert args["out"]["role"] == "out" and args["out"]["shape"] == args["x"]["shape"]  # what it returns


def test_cuda_only_op_is_onboarded_with_its_checks_left_for_the_gpu(env):
    calls = _write(env / "c.json", [_call(x=((2, 8), "bfloat16"), out=((2, 8), "bfloat16"))])
    out = CliRunner().invoke(main, ["onboard", "fakesgl.layers:cuda_only", "--shapes", calls])
    assert out.exit_code == 0, out.output
    assert "to be checked at the first GPU run: the op itself (on CPU: RuntimeError: needs CUDA)" in out.output
    spec = tomllib.loads((env / "home" / "specs" / "cuda_only.toml").read_text())
    assert spec["dtypes"] == ["bfloat16"] and spec["onboard"]["gpu_check"] == ""


@pytest.mark.parametrize("entry, extra, message", [
    ("fakesgl.layers", [], "bad entry point"),
    ("fakesgl.nope:f", [], "cannot read fakesgl.nope"),
    ("fakesgl.layers:missing", [], "has no function 'missing'"),
    ("fakesgl.layers:act_and_mul", ["--model", "gpt-9"], "unknown model 'gpt-9'"),
])
def test_bad_input_is_one_line(env, entry, extra, message):
    calls = _write(env / "c.json", [_call(x=((2, 8), "bfloat16"))])
    out = CliRunner().invoke(main, ["onboard", entry, "--shapes", calls, *extra])
    assert out.exit_code == 1 and message in out.output and len(out.output.strip().splitlines()) == 1
    assert not (env / "home" / "specs").exists()


def test_existing_spec_needs_force_and_bad_calls_file_is_named(env):
    calls = _write(env / "c.json", [_call(x=((2, 8), "bfloat16"), out=((2, 4), "bfloat16"))])
    args = ["onboard", "fakesgl.layers:act_and_mul", "--shapes", calls]
    assert CliRunner().invoke(main, args).exit_code == 0
    again = CliRunner().invoke(main, args)
    assert again.exit_code == 1 and "pass --force" in again.output
    assert CliRunner().invoke(main, [*args, "--force"]).exit_code == 0
    (env / "bad.json").write_text('{"calls": [{"tensor": {}}]}')
    bad = CliRunner().invoke(main, ["onboard", "fakesgl.layers:act_and_mul", "--shapes", str(env / "bad.json")])
    assert bad.exit_code == 1 and "is not a list of recorded calls" in bad.output


DOCS_CALLS = [{"tensors": {"input": {"shape": [16, 28672], "dtype": "bfloat16"},
                           "out": {"shape": [16, 14336], "dtype": "bfloat16"}}}]


def test_the_docs_example_on_the_installed_sglang(env):
    """docs/specs.md: `onboard sglang.srt.layers.activation:gelu_and_mul --shapes calls.json --model llama-3-8b`.
    SGLang's module does not import on CPU (torchvision, transformers): the signature is read from its source."""
    from astra_sglang.extraction.static_targets import module_source

    if module_source("sglang.srt.layers.activation") is None:
        pytest.skip("sglang is not installed here (CI installs it: tests/patching/requirements.txt)")
    (env / "calls.json").write_text(json.dumps(DOCS_CALLS))
    out = CliRunner().invoke(main, ["onboard", "sglang.srt.layers.activation:gelu_and_mul", "--shapes",
                                    str(env / "calls.json"), "--model", "llama-3-8b"])
    assert out.exit_code == 0, out.output
    spec = tomllib.loads((env / "home" / "specs" / "sglang_gelu_and_mul.toml").read_text())  # gelu_and_mul ships
    assert spec["reference"] == "astra_sglang.references.small_ops:gelu_and_mul"  # the tool's fp64 one
    assert {a["name"]: a["shape"] for a in spec["arguments"]} == {"input": ["tokens", "2*intermediate"],
                                                                  "out": ["tokens", "intermediate"]}
    assert spec["sglang_targets"] == [{"module": "sglang.srt.layers.activation", "attr": "gelu_and_mul",
                                       "note": "the entry point onboarded; `from x import f` copies are rebound too"}]
