"""The loop with the real harness in compile-only mode (nvcc, no GPU): good and broken candidates."""
import importlib
import shutil

import pytest
from agent_support import PLAN, TESTS, kernel, run_config

from astra_sglang.agents.journal import RunLog
from astra_sglang.agents.scripted import ScriptedModel
from astra_sglang.agents.loop import run

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
