"""The loop with the real harness in compile-only mode (nvcc, no GPU): good and broken candidates."""
import importlib
import importlib.util
import shutil

import pytest
from agent_support import PLAN, TESTS, kernel, run_config

from astra_sglang.optimize.agents.journal import RunLog
from astra_sglang.optimize.agents.loop import run
from astra_sglang.optimize.agents.scripted import ScriptedModel

pytestmark = pytest.mark.nvcc


def real_evaluate():
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not found")
    try:
        return importlib.import_module("astra_sglang.harness.isolate").evaluate
    except (ImportError, AttributeError) as exc:
        pytest.skip(f"astra_sglang.harness.isolate.evaluate is not available yet ({exc})")


def test_compile_only_with_the_real_harness(tmp_path):
    evaluate = real_evaluate()
    broken = kernel("x", "__device__ half3 nope;\n")
    model = ScriptedModel([TESTS, PLAN, broken, PLAN, kernel("speedup=1.1")], name="o4-mini")
    outcome = run(run_config(rounds=2, compile_only=True, timeout_s=300), tmp_path / "r", evaluate, model)
    status = {r.round: r.payload["status"] for r in RunLog(tmp_path / "r").of_role("round")}
    assert status == {0: "compiled", 1: "build", 2: "compiled"}, status
    assert outcome.winner is None


def test_no_gpu_stops_before_any_llm_call_and_says_built(tmp_path):
    """Without a GPU (and without --compile-only) the start kernel builds but cannot be checked: the run stops
    there, names it "compiled" (not a build failure), and asks the model nothing."""
    evaluate = real_evaluate()
    if importlib.util.find_spec("torch") and __import__("torch").cuda.is_available():
        pytest.skip("a GPU is present")
    model = ScriptedModel([], name="o4-mini")
    outcome = run(run_config(rounds=2, timeout_s=300), tmp_path / "r", evaluate, model)
    assert model.calls == [] and outcome.winner is None
    assert outcome.baseline_error.startswith("the start kernel could not be evaluated (compiled: no CUDA GPU")


def test_generated_dispatch_of_real_kernels_compiles(tmp_path, monkeypatch):
    """A per-shape dispatch among whole kernel files (a tuned shipped patch, our first kernel, a fixture)
    builds: namespaces, hoisted includes and #undef'd macros keep them apart."""
    from pathlib import Path

    from astra_sglang.harness.build import build_library
    from astra_sglang.optimize.tuner.ensemble import ORIGINAL, Member, ensemble_source
    from astra_sglang.paths import kernels_dir, patches_dir
    from astra_sglang.specs.registry import get_spec

    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not found")
    monkeypatch.setenv("ASTRA_SGLANG_CACHE", str(tmp_path / "cache"))
    fixture = Path(__file__).parents[1] / "fixtures" / "honest" / "silu_and_mul_vec.cu"
    members = [Member("shipped", (patches_dir() / "silu_and_mul" / "kernel.cu").read_text()),
               Member("first", (kernels_dir() / "silu_and_mul.cu").read_text()), Member("vec", fixture.read_text())]
    choice = {((1, 4096), "bfloat16"): 0, ((512, 14336), "bfloat16"): 1, ((1, 4096), "float16"): 2,
              ((512, 14336), "float16"): ORIGINAL}
    path = tmp_path / "dispatch.cu"
    path.write_text(ensemble_source(get_spec("silu_and_mul"), members, choice, "test"))
    info = build_library(path, arch="sm_90")
    assert info.ok, info.log
