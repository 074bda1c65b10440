"""`optimize` through click: the LLM path against the fake server, the tuner fallback, resume, --from."""
import json
import sys
import types
from pathlib import Path

import pytest
from click.testing import CliRunner
from agent_support import SUMMARY, TESTS, FreshPlans, Killed, StandIn, kernel, plans

from astra_sglang.cli import optimize as cli
from astra_sglang.errors import AstraError
from astra_sglang.optimize.agents.journal import RunLog
from astra_sglang.optimize import starts
from astra_sglang.optimize.records import Winner
from astra_sglang.optimize.selection import ops_from_profile
from astra_sglang.patchset import store
from astra_sglang.patchset.manifest import PatchManifest
from astra_sglang.paths import patches_dir
from astra_sglang.specs.registry import get_spec


@pytest.fixture(autouse=True)
def no_env(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


def invoke(args, evaluator, monkeypatch):
    monkeypatch.setattr(cli, "harness_evaluator", lambda: evaluator)
    return CliRunner().invoke(cli.optimize, args)


def test_llm_run_and_resume(fake, tmp_path, monkeypatch):
    server = fake({"testing": [TESTS], "planning": plans(2),
                   "coding": [kernel("speedup=1.2", "// MARK kill\n"), kernel("speedup=1.3")]}, {"profiling": SUMMARY})
    out = tmp_path / "run"
    args = ["silu_and_mul", "--rounds", "2", "--llm", "o4-mini", "--base-url", server.base_url, "--api-key", "k",
            "--out", str(out), "--shapes", "quick", "--patches-dir", str(tmp_path / "patches"),
            "--population", "1", "--plans", "1", "--repairs", "0", "--speed-turns", "0", "--islands", "1",
            "--inflight", "1"]
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

    monkeypatch.setitem(sys.modules, "astra_sglang.optimize.tuner.cuda_tune",
                        types.SimpleNamespace(run_tuner=run_tuner))
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
    assert starts.start_source(spec, None).name == "silu_and_mul.cu"
    (tmp_path / "kernel.cu").write_text("x")
    assert starts.start_source(spec, str(tmp_path)) == tmp_path / "kernel.cu"
    (tmp_path / "kernel.cu").unlink()
    with pytest.raises(AstraError, match="exactly one"):
        starts.start_source(spec, str(tmp_path))


def test_several_ops_as_one_job(fake, tmp_path, monkeypatch):
    server = fake({}, {"testing": TESTS, "planning": FreshPlans(), "coding": kernel("speedup=1.2"),
                       "profiling": SUMMARY})
    out = tmp_path / "job"
    args = ["silu_and_mul", "rmsnorm", "--rounds", "1", "--llm", "o4-mini", "--base-url", server.base_url,
            "--api-key", "k", "--out", str(out), "--shapes", "quick", "--population", "1", "--plans", "1"]
    result = invoke(args, StandIn(), monkeypatch)
    assert result.exit_code == 0, result.output
    rows = [json.loads(x) for x in (out / "job.jsonl").read_text().splitlines()]
    assert [(r["op"], r["status"]) for r in rows] == [("silu_and_mul", "winner"), ("rmsnorm", "winner")]
    assert (out / "rmsnorm" / "report.md").is_file() and "| rmsnorm | winner | 1.200x |" in (out / "job.md").read_text()
    assert "[rmsnorm] winner: r01-c0-a0 (llm), geomean 1.200x" in result.output


def test_ops_from_a_profile(fake, tmp_path, monkeypatch):
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps({"rows": [{"op": "rmsnorm", "share": 0.3}, {"kernel": "nvjet", "name": "gemm"},
                                            "silu_and_mul", {"op": "rmsnorm"}]}))
    assert ops_from_profile(profile) == (["rmsnorm", "silu_and_mul"], ["gemm"])
    listed = tmp_path / "list.json"  # a bare list of op names is a profile too
    listed.write_text('["fused_add_rmsnorm"]')
    assert ops_from_profile(listed) == (["fused_add_rmsnorm"], [])
    server = fake({}, {"testing": TESTS, "planning": FreshPlans(), "coding": kernel("speedup=1.1"),
                       "profiling": SUMMARY})
    args = ["--from-profile", str(profile), "--rounds", "1", "--llm", "m", "--base-url", server.base_url, "--api-key",
            "k", "--out", str(tmp_path / "job"), "--shapes", "quick", "--population", "1", "--plans", "1"]
    result = invoke(args, StandIn(), monkeypatch)
    assert result.exit_code == 0, result.output
    assert "the profile's rows without a spec here (skipped): gemm" in result.output
    assert sorted(p.name for p in (tmp_path / "job").iterdir() if p.is_dir()) == ["rmsnorm", "silu_and_mul"]


@pytest.mark.parametrize("args, message", [
    ([], "name the ops to optimize one way"),
    (["silu_and_mul", "--all"], "name the ops to optimize one way"),
    (["nope"], "unknown kernel 'nope'"),
    (["--from-profile", "missing.json"], "no such profile file"),
    (["silu_and_mul", "rmsnorm", "--from", "x.cu"], "--from names one start kernel"),
])
def test_bad_input_is_one_clear_error(args, message, monkeypatch):
    result = invoke(args, StandIn(), monkeypatch)
    assert result.exit_code == 1 and message in str(result.exception)


def test_a_profile_without_known_ops(tmp_path, monkeypatch):
    bad = tmp_path / "p.json"
    bad.write_text('{"rows": [{"op": "gemm"}]}')
    result = invoke(["--from-profile", str(bad)], StandIn(), monkeypatch)
    assert "names no op that has a spec here (gemm)" in str(result.exception)
    bad.write_text('{"rows": 3}')
    assert "not a profile's JSON" in str(invoke(["--from-profile", str(bad)], StandIn(), monkeypatch).exception)


def test_a_start_kernel_that_cannot_be_evaluated_fails_the_command(fake, tmp_path, monkeypatch):
    server = fake({}, {})
    start = tmp_path / "k.cu"
    start.write_text("// MARK crash\n" + kernel().split("```cuda\n")[1].split("```")[0])
    args = ["silu_and_mul", "--from", str(start), "--llm", "m", "--base-url", server.base_url, "--api-key", "k",
            "--out", str(tmp_path / "r")]
    result = invoke(args, StandIn(), monkeypatch)
    assert result.exit_code == 1 and "could not be evaluated (crash" in str(result.exception)
    assert server.requests == []


def test_pool_options_reach_the_pool(fake, tmp_path, monkeypatch):
    import astra_sglang.optimize.pool as search
    from astra_sglang.optimize.pool.pool import LocalPool

    seen = []

    def make_pool(ray=None, gpus=None, evaluator=None, builder=None):
        seen.append((ray, gpus))
        return LocalPool(gpus=[], evaluator=evaluator)

    monkeypatch.setattr(search, "make_pool", make_pool)
    server = fake({}, {"testing": TESTS, "planning": FreshPlans(), "coding": kernel("speedup=1.2"),
                       "profiling": SUMMARY})
    args = ["silu_and_mul", "--rounds", "1", "--llm", "m", "--base-url", server.base_url, "--api-key", "k",
            "--out", str(tmp_path / "r"), "--shapes", "quick", "--ray", "auto", "--gpus", "0,1"]
    assert invoke(args, StandIn(), monkeypatch).exit_code == 0
    assert seen == [("auto", ["0", "1"])]


def test_tuner_without_gpu_says_so(tmp_path, monkeypatch):
    """Every evaluation answered "no CUDA GPU": one line saying so, not "no configuration was correct"."""
    from astra_sglang.harness.records import EvalResult

    def no_gpu(req):
        return EvalResult(kernel=req.kernel, candidate=req.candidate.name(),
                          reason="no CUDA GPU: checking and timing need one (builds succeeded)")

    result = invoke(["silu_and_mul", "--out", str(tmp_path / "t"), "--rounds", "2"], no_gpu, monkeypatch)
    assert result.exit_code != 0 and isinstance(result.exception, AstraError), result.output
    message = str(result.exception)
    assert message.startswith("no CUDA device: the tuner times candidates on a GPU") and "\n" not in message
    assert "no configuration was correct" not in result.output


@pytest.mark.parametrize("given", ["py:sgl_kernel:silu_and_mul", "extracted/kernel.cu"])
def test_tuner_honours_baseline(tmp_path, monkeypatch, given):
    seen = []

    def run_tuner(spec, start, rounds, run_dir, evaluator, echo=None, baseline=None, batch=None):
        seen.append(baseline)
        return None

    monkeypatch.setitem(sys.modules, "astra_sglang.optimize.tuner.cuda_tune",
                        types.SimpleNamespace(run_tuner=run_tuner))
    monkeypatch.chdir(tmp_path)
    result = invoke(["silu_and_mul", "--out", str(tmp_path / "t"), "--baseline", given], StandIn(), monkeypatch)
    assert result.exit_code == 0, result.output
    want = given if given.startswith("py:") else str((tmp_path / given).resolve())
    assert seen and seen[0].path == want


@pytest.mark.parametrize("shipped_speedup", [None, 5.0])
def test_without_patches_dir_the_winner_goes_to_the_user_folder_unless_the_shipped_patch_is_better(
        tmp_path, monkeypatch, shipped_speedup):
    """The user folder's patches replace the shipped ones in `launch`: a winner slower than the shipped
    patch (on the cases both measured) is not written there."""
    home, shipped = tmp_path / "home", tmp_path / "shipped"
    monkeypatch.setenv("ASTRA_SGLANG_HOME", str(home))
    (shipped / "silu_and_mul").mkdir(parents=True)  # the tuner starts from its kernel
    real = patches_dir() / "silu_and_mul" / "kernel.cu"
    (shipped / "silu_and_mul" / "kernel.cu").write_text(real.read_text())
    measured = [{"shape": [4, 64], "dtype": "float16", "candidate_us": 1.0, "baseline_us": 5.0,
                 "speedup": shipped_speedup}] if shipped_speedup else []  # nothing to compare: the winner is written
    (shipped / "silu_and_mul" / "manifest.json").write_text(json.dumps(
        {"op": "silu_and_mul", "dtypes": ["float16"], "provenance": {"method": "hand"}, "measured": measured}))
    monkeypatch.setattr(store, "patches_dir", lambda: shipped)  # where the patch set's shipped layer is

    def run_tuner(spec, start, rounds, run_dir, evaluator, echo=None, baseline=None, batch=None):
        final = batch([cli_request(spec, start)])[0]
        return Winner(kernel=spec.name, source=str(start), round=1, speedup=1.1, final=final, method="tuner",
                      rounds=rounds, run_id=run_dir.name)

    monkeypatch.setitem(sys.modules, "astra_sglang.optimize.tuner.cuda_tune",
                        types.SimpleNamespace(run_tuner=run_tuner))
    result = invoke(["silu_and_mul", "--out", str(tmp_path / "t"), "--rounds", "1"], StandIn(), monkeypatch)
    assert result.exit_code == 0, result.output
    written = home / "patches" / "silu_and_mul" / "manifest.json"
    if shipped_speedup:
        assert f"kept the existing {shipped / 'silu_and_mul'}" in result.output and not written.exists()
    else:
        assert f"patch written to {home / 'patches' / 'silu_and_mul'}" in result.output and written.is_file()


def test_a_timed_job_of_two_ops_against_a_noisy_server_resumes(tmp_path, monkeypatch):
    """benchmarks/gpu/sglang_llm_loop.sh's flow on the CPU: a server with no chat template answering noise, two
    ops as one job whose rounds stop after `deadline_s` (a settings file), then the job resumed for as long
    again; both parts end cleanly, with a priced cost line per call."""
    from fake_openai import FakeOpenAI, Server

    noise = " ".join(["lorem", "ipsum", "dolor"] * 300)
    settings = tmp_path / "settings.toml"
    settings.write_text("plateau = 0\ndeadline_s = 2\nrounds = 500\nmax_rounds = 500\n")
    job = tmp_path / "job"
    with FakeOpenAI(lambda body: noise, Server(chat_template=False, context_len=20000)) as server:
        common = ["--llm", "dummy", "--base-url", server.base_url, "--api-key", "none", "--budget-usd", "20",
                  "--price", "dummy=0.10/0.40", "--patches-dir", str(tmp_path / "p")]
        first = invoke(["silu_and_mul", "rmsnorm", *common, "--config", str(settings), "--shapes", "quick",
                        "--out", str(job)], StandIn(), monkeypatch)
        assert first.exit_code == 0, first.output
        counts = {op: len((job / op / "llm.log").read_text().splitlines()) for op in ("silu_and_mul", "rmsnorm")}
        second = invoke(["--resume", str(job), *common], StandIn(), monkeypatch)
        assert second.exit_code == 0, second.output
    for op in ("silu_and_mul", "rmsnorm"):
        stops = [r.summary for r in RunLog(job / op).of_role("stop")]
        assert stops == ["time is up: the rounds' deadline passed"] * 2
        calls = (job / op / "llm.log").read_text().splitlines()
        assert len(calls) > counts[op] > 0 and all(" completions" in c and "dummy" in c for c in calls)
        assert all("(unpriced model)" not in c for c in calls)
    assert "| rmsnorm | no winner |" in (job / "job.md").read_text()


def test_a_resumed_run_keeps_what_its_measurements_depend_on(tmp_path, monkeypatch):
    from astra_sglang.optimize.records import RunConfig

    run_dir = tmp_path / "run"
    RunLog(run_dir).save_config(RunConfig(kernel="silu_and_mul", shapes="quick", start_source="x.cu"))
    settings = tmp_path / "s.toml"
    settings.write_text('shapes = "paper"\nspeed_turns = 3\n')
    result = invoke(["--resume", str(run_dir), "--config", str(settings), "--llm", "o4-mini", "--api-key", "k"],
                    StandIn(), monkeypatch)
    assert result.exit_code == 1 and str(result.exception) == f"{run_dir}: a resumed run keeps its shapes (its " \
        "candidates were measured so); start a new run to change them"
