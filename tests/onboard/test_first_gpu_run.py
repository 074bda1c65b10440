"""The first GPU run of an onboarded op, simulated on CPU with the stand-ins (the device the checks run on is
onboard/gpu_check.py's DEVICE): the op's dtypes, its tolerance from its own run-to-run and upcast differences,
the proposed reference accepted where it agrees with the op and replaced by the op itself where it does not,
all written into the spec once. `onboard` on a machine with a GPU runs it before the spec is placed; a spec
onboarded without one gets it from its first `bench`, which then compares SGLang's op with the first kernel."""
from __future__ import annotations

import sys
import tomllib

import pytest
import torch
from click.testing import CliRunner
from onboard_support import calls_file

from astra_sglang.cli import main
from astra_sglang.harness import isolate
from astra_sglang.harness.records import BuildInfo, EvalResult
from astra_sglang.onboard import gpu_check
from astra_sglang.specs import registry


@pytest.fixture
def gpu(monkeypatch):
    """A 'GPU' that is the CPU: the checks' device, torch's availability and the device's name."""
    monkeypatch.setattr(gpu_check, "DEVICE", "cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "CPU standing in for a GPU")


@pytest.fixture
def later_gpu(monkeypatch):
    """No GPU until the test calls the returned function (onboard on a CPU machine, bench on a GPU one)."""
    monkeypatch.setattr(gpu_check, "DEVICE", "cpu")
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "CPU standing in for a GPU")
    return lambda: monkeypatch.setattr(torch.cuda, "is_available", lambda: True)


@pytest.fixture
def live(home, monkeypatch):
    from onboard_support import STANDINS

    monkeypatch.syspath_prepend(str(STANDINS))
    monkeypatch.setenv("ASTRA_STANDIN_IMPORTS", "1")


def onboarded(name: str, entry: str, calls: str, *extra) -> tuple[dict, str]:
    """The spec file onboard wrote (on the 'GPU': already checked there) and onboard's output."""
    out = CliRunner().invoke(main, ["onboard", entry, "--shapes", calls_file(calls), "--name", name, *extra])
    assert out.exit_code == 0, out.output
    return tomllib.loads(registry.registry().paths[name].read_text()), out.output


@pytest.mark.parametrize("name, entry, calls", [("fi_rmsnorm", "flashinfer.norm:rmsnorm", "rmsnorm"),
                                               ("gelu", "flashinfer.activation:gelu_and_mul", "gelu_and_mul")])
def test_a_proposed_reference_that_agrees_is_accepted_with_the_measured_tolerance(live, gpu, name, entry, calls):
    data, output = onboarded(name, entry, calls)
    proposed = data["onboard"]["proposed"]
    assert data["reference"] == proposed and data["reference_dtype"] == "float64"
    check = data["onboard"]["gpu_check"]
    assert check.startswith("CPU standing in for a GPU, ") and f"the reference {proposed} agrees with the op" in check
    assert set(data["onboard"]["measured"]) == set(data["dtypes"]) == {"bfloat16", "float16", "float32"}
    assert all("run-to-run 0," in m for m in data["onboard"]["measured"].values())  # the stand-ins are deterministic
    for dtype, tol in data["tolerance"].items():  # at least the dtype's rounding
        assert tol["atol"] >= {"bfloat16": 1.6e-2, "float16": 2e-3, "float32": 1e-5}[dtype] * 0.999
    assert "ok: first GPU run: " in output and "agrees with the op" in output
    assert "to be checked at the first GPU run" not in output
    assert not gpu_check.first_gpu_run(registry.get_spec(name), registry.registry().paths[name], print)  # done once


def test_the_oracle_gets_a_tolerance_and_keeps_the_op_as_reference(live, gpu):
    data, _ = onboarded("ln", "flashinfer.norm:layernorm", "layernorm")
    assert data["reference"] == "astra_user_ln:op" and data["reference_dtype"] == "op"
    assert "the op is its own reference (oracle)" in data["onboard"]["gpu_check"]
    assert "upcast" in data["onboard"]["measured"]["bfloat16"]


def test_a_reference_that_disagrees_is_replaced_by_the_op_itself(live, gpu, tmp_path, monkeypatch):
    (tmp_path / "mine_nobias.py").write_text(  # forgets beta: runs, writes every output, computes something else
        "import torch\n\ndef layernorm(input, gemma, beta, eps, out):\n"
        "    out.copy_(torch.nn.functional.layer_norm(input, input.shape[-1:], gemma, None, eps))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    data, _ = onboarded("ln2", "flashinfer.norm:layernorm", "layernorm", "--reference", "mine_nobias:layernorm")
    assert data["reference"] == "astra_user_ln2:op" and data["reference_dtype"] == "op"
    check = data["onboard"]["gpu_check"]
    assert "the proposed reference mine_nobias:layernorm was not accepted" in check and "differs from it" in check
    assert data["onboard"]["proposed"] == "mine_nobias:layernorm"  # kept, to be fixed and proposed again


@pytest.mark.parametrize("libclang", [True, False])
def test_bench_runs_the_first_gpu_run_then_compares_the_op_with_its_first_kernel(live, later_gpu, monkeypatch,
                                                                                 tmp_path, libclang):
    data, _ = onboarded("ln3", "flashinfer.norm:layernorm", "layernorm")  # on a machine without a GPU
    if not libclang:  # SGLang's GPU environment has no libclang: bench must not need it to find the first kernel
        for name in [m for m in sys.modules if m == "clang" or m.startswith(("clang.", "astra_sglang.extraction"))]:
            monkeypatch.delitem(sys.modules, name)
        monkeypatch.setitem(sys.modules, "clang", None)
    assert data["onboard"]["gpu_check"] == ""
    later_gpu()
    seen = []

    def fake_evaluate(req):
        seen.append(req)
        return EvalResult(kernel=req.kernel, candidate=req.candidate.name(), baseline=req.baseline.name(), ok=True,
                          stage="done", build=BuildInfo(ok=True), gpu="fake", shapes=[])

    monkeypatch.setattr(isolate, "evaluate", fake_evaluate)
    monkeypatch.setattr("astra_sglang.cli.bench._has_gpu", lambda: True)
    out = CliRunner().invoke(main, ["bench", "ln3", "--out", str(tmp_path / "r.jsonl")])
    assert out.exit_code == 0, out.output
    assert "ln3: first GPU run" in out.output
    req = seen[-1]
    assert req.candidate.path == req.baseline.path == "py:astra_user_ln3:op"
    assert req.dtypes == ["bfloat16", "float16"] and req.shapes == [(1, 4096), (16, 4096), (128, 4096), (2048, 4096)]
    assert registry.get_spec("ln3").onboard.gpu_check  # written: the next bench goes straight to the evaluation
    again = CliRunner().invoke(main, ["bench", "ln3", "--out", str(tmp_path / "r.jsonl")])
    assert again.exit_code == 0 and "first GPU run" not in again.output


def test_an_op_that_runs_in_no_dtype_on_the_gpu_is_not_onboarded(home, gpu, tmp_path, monkeypatch):
    (tmp_path / "mine_broken.py").write_text("def op(x, out):\n    raise RuntimeError('illegal memory access')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "c.json").write_text('[{"tensors": {"x": {"shape": [2, 8], "dtype": "bfloat16"}, '
                                     '"out": {"shape": [2, 8], "dtype": "bfloat16"}}}]')
    out = CliRunner().invoke(main, ["onboard", "mine_broken:op", "--shapes", str(tmp_path / "c.json")])
    assert out.exit_code == 1 and "the op runs in none of ['bfloat16', 'float16', 'float32'] at 2x8" in out.output
    assert not list(home.rglob("*.toml")) and not list(home.rglob("*.py"))


OTHER_IN_FP32 = '''import torch


def relu_like(x: torch.Tensor, out: torch.Tensor) -> None:
    """Reads float32 as if it were its own dtype: another computation there, without refusing it."""
    out.copy_(torch.relu(x) * (1000.0 if x.dtype == torch.float32 else 1.0))
'''


def test_an_upcast_that_is_another_computation_is_left_out(home, gpu, tmp_path, monkeypatch):
    (tmp_path / "mine_fp32.py").write_text(OTHER_IN_FP32)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "c.json").write_text('[{"tensors": {"x": {"shape": [4, 64], "dtype": "bfloat16"}, '
                                     '"out": {"shape": [4, 64], "dtype": "bfloat16"}}}]')
    out = CliRunner().invoke(main, ["onboard", "mine_fp32:relu_like", "--shapes", str(tmp_path / "c.json")])
    assert out.exit_code == 0, out.output
    spec = tomllib.loads((home / "specs" / "relu_like.toml").read_text())
    assert "not the same computation, left out" in spec["onboard"]["measured"]["bfloat16"]
    assert spec["tolerance"]["bfloat16"] == {"atol": 0.016, "rtol": 0.016}  # not widened by it


WRAPPED = '''import torch


def deco(fn):
    def wrapper(*args, **kwargs):  # no functools.wraps: the live function tells nothing
        return fn(*args, **kwargs)
    return wrapper


@deco
def scaled(x: torch.Tensor, out: torch.Tensor = None, scale: float = 2.0) -> torch.Tensor:
    if out is None:
        out = torch.empty_like(x)
    out.copy_(x * scale)
    return out
'''


def test_a_wrapper_without_a_signature_is_read_from_its_source(home, tmp_path, monkeypatch):
    (tmp_path / "mine_wrapped.py").write_text(WRAPPED)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "c.json").write_text('[{"tensors": {"x": {"shape": [3, 16], "dtype": "float16"}}}]')
    out = CliRunner().invoke(main, ["onboard", "mine_wrapped:scaled", "--shapes", str(tmp_path / "c.json")])
    assert out.exit_code == 0, out.output
    assert "is a wrapper with no signature" in out.output
    spec = tomllib.loads((home / "specs" / "scaled.toml").read_text())
    assert [(a["name"], a.get("role", a.get("kind"))) for a in spec["arguments"]] == [
        ("x", "in"), ("out", "out"), ("scale", "scalar")]
