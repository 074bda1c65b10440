"""An onboarded op with no kernel: `optimize --llm` starts from a skeleton that describes the spec and declines
every shape, with SGLang's op (the spec's adapter) as the original the run measures; the built-in tuner, which
needs a kernel with knobs, says what to do instead."""
from __future__ import annotations

from pathlib import Path

import pytest
from onboard_support import calls_file

from astra_sglang.errors import AstraError
from astra_sglang.harness.records import BuildInfo, EvalResult
from astra_sglang.onboard import writer
from astra_sglang.optimize import run as runs
from astra_sglang.optimize.records import LLMConfig
from astra_sglang.optimize.starts import FROM_NOTHING, start_source, tuner_start
from astra_sglang.specs.registry import get_spec


@pytest.fixture
def op(standins, home):
    writer.onboard("sgl_kernel:sgl_per_token_quant_fp8", writer.load_calls(Path(calls_file("sgl_per_token_quant_fp8"))))
    return get_spec("sgl_per_token_quant_fp8")


def test_the_start_is_a_skeleton_that_names_the_spec_and_declines_everything(op):
    path = start_source(op, None)
    text = path.read_text()
    assert FROM_NOTHING in text and "return ASTRA_UNSUPPORTED;" in text
    assert "output_q: out tensor, float8_e4m3fn, [tokens, d]" in text and "sgl_kernel:sgl_per_token_quant_fp8" in text
    assert start_source(op, None) == path  # cached by its text


@pytest.mark.nvcc
def test_the_skeleton_builds(op):
    from astra_sglang.harness.build import build_library

    info = build_library(start_source(op, None), {}, "sm_90")
    assert info.ok, info.log


def test_the_llm_run_measures_sglangs_op_as_the_original(op, tmp_path, monkeypatch):
    seen = {}

    def fake_run(config, run_dir, pool, model, profiler=None, echo=None):
        seen["config"] = config
        return None

    monkeypatch.setattr("astra_sglang.optimize.agents.loop.run", fake_run)
    monkeypatch.setenv("OPENAI_API_KEY", "none")
    opts = runs.RunOptions(rounds=1, shapes="quick", single_agent=False, compile_only=True, baseline=None,
                           start=None, settings={"population": 1, "plans": 1, "repairs": 0})
    lines: list[str] = []
    runs.llm_run(op.name, tmp_path / "run", None, LLMConfig(model="m"), opts, lines.append)
    config = seen["config"]
    assert config.from_nothing and config.baseline == "py:astra_user_sgl_per_token_quant_fp8:op"
    assert "from nothing (SGLang's op is the original)" in lines[0]


def test_the_loop_evaluates_the_baseline_op_first(op, tmp_path):
    from astra_sglang.optimize.agents.loop import BaselineFailed, Optimizer
    from astra_sglang.optimize.records import RunConfig

    asked = []

    class Pool:
        def submit(self, req):
            asked.append(req)
            from concurrent.futures import Future

            done = Future()
            done.set_result(EvalResult(kernel=req.kernel, candidate=req.candidate.name(), ok=False, stage="done",
                                       build=BuildInfo(ok=True), reason="no CUDA GPU"))
            return done

    config = RunConfig(kernel=op.name, start_source=str(start_source(op, None)), from_nothing=True,
                       baseline="py:astra_user_sgl_per_token_quant_fp8:op", shapes="quick", rounds=1)
    with pytest.raises(BaselineFailed):
        Optimizer(config, tmp_path / "run", Pool(), None).prepare()
    assert asked[0].candidate.path == "py:astra_user_sgl_per_token_quant_fp8:op"
    assert asked[0].baseline.path == "py:astra_user_sgl_per_token_quant_fp8:op"


def test_the_tuner_without_a_kernel_or_a_source_says_what_to_run(op, tmp_path):
    with pytest.raises(AstraError, match=r"--llm MODEL` writes kernels from the spec, or pass --from FILE"):
        tuner_start(op, None, None, tmp_path / "run", print)
