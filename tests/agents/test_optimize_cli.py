"""`optimize` through click: the LLM path against the fake server, the tuner fallback, resume, --from."""
import sys
import types

import pytest
from click.testing import CliRunner
from agent_support import PLAN, SUMMARY, TESTS, Killed, StandIn, kernel

from astra_sglang.agents import cli
from astra_sglang.agents.records import Winner
from astra_sglang.errors import AstraError
from astra_sglang.patching.manifest import PatchManifest
from astra_sglang.specs.registry import get_spec


@pytest.fixture(autouse=True)
def no_env(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


def invoke(args, evaluator, monkeypatch):
    monkeypatch.setattr(cli, "harness_evaluator", lambda: evaluator)
    return CliRunner().invoke(cli.optimize, args)


def test_llm_run_and_resume(fake, tmp_path, monkeypatch):
    server = fake({"testing": [TESTS], "planning": [PLAN] * 2,
                   "coding": [kernel("speedup=1.2", "// MARK kill\n"), kernel("speedup=1.3")]}, {"profiling": SUMMARY})
    out = tmp_path / "run"
    args = ["silu_and_mul", "--rounds", "2", "--llm", "o4-mini", "--base-url", server.base_url, "--api-key", "k",
            "--out", str(out), "--shapes", "quick", "--patches-dir", str(tmp_path / "patches"),
            "--population", "1", "--plans", "1", "--repairs", "0"]
    result = invoke(args, StandIn(kill_on="kill"), monkeypatch)
    assert isinstance(result.exception, Killed)
    result = invoke(["silu_and_mul", "--resume", str(out), "--base-url", server.base_url, "--api-key", "k",
                     "--patches-dir", str(tmp_path / "patches")], StandIn(), monkeypatch)
    assert result.exit_code == 0, result.output
    assert "winner: r02-c0-a0 (llm), geomean 1.300x" in result.output
    assert PatchManifest.load(tmp_path / "patches" / "silu_and_mul").provenance.method == "llm"
    assert "api_key" not in (out / "config.json").read_text()


def test_no_llm_falls_back_to_the_tuner(tmp_path, monkeypatch):
    starts = []

    def run_tuner(spec, start, rounds, run_dir, evaluator, echo=None, baseline=None, batch=None):
        starts.append(start)
        final = batch([cli_request(spec, start)])[0]
        return Winner(kernel=spec.name, source=str(start), round=1, speedup=1.1, final=final, method="tuner",
                      rounds=rounds, run_id=run_dir.name)

    monkeypatch.setitem(sys.modules, "astra_sglang.tuner", types.SimpleNamespace(run_tuner=run_tuner))
    result = invoke(["silu_and_mul", "--out", str(tmp_path / "t"), "--rounds", "3"], StandIn(), monkeypatch)
    assert result.exit_code == 0, result.output
    # no --from: the tuner starts from the shipped kernel, whose knobs it can search
    assert starts[0].parts[-2:] == ("silu_and_mul", "kernel.cu") and "astra:knob" in starts[0].read_text()
    manifest = PatchManifest.load(tmp_path / "t" / "patch" / "silu_and_mul")
    assert manifest.provenance.method == "tuner" and manifest.provenance.rounds == 3


def cli_request(spec, start):
    from astra_sglang.harness.records import EvalRequest, KernelSource

    return EvalRequest(kernel=spec.name, candidate=KernelSource(path=str(start)), shapes=[(4, 64)], dtypes=["float16"])


def test_start_source_resolution(tmp_path):
    spec = get_spec("silu_and_mul")
    assert cli.start_source(spec, None).name == "silu_and_mul.cu"
    (tmp_path / "kernel.cu").write_text("x")
    assert cli.start_source(spec, str(tmp_path)) == tmp_path / "kernel.cu"
    (tmp_path / "kernel.cu").unlink()
    with pytest.raises(AstraError, match="exactly one"):
        cli.start_source(spec, str(tmp_path))
