"""On a GPU with SGLang: fused_moe at per-tensor fp8_w8a8 through the strict evaluator (spec fused_moe_fp8): a config
against SGLang's own pick passes every check (the edge shapes too) and is timed, at a decode and a prefill batch
size. Its first run on a GPU also checks the tolerance's margin: spec fused_moe_fp8's reference rounds as the
kernel does, so the checks should pass with room (see the run's error ratios)."""
from __future__ import annotations

import importlib.util

import pytest

from astra_sglang.harness.isolate import evaluate
from astra_sglang.harness.records import EvalRequest, KernelSource
from astra_sglang.triton.moe.shapes import MoeShape

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(importlib.util.find_spec("sgl_kernel") is None, reason="needs SGLang's CUDA build")]
SHAPE = MoeShape(8, 1024, 512, 2, quant="fp8_w8a8")


def _request(candidate: str, time: bool = True) -> EvalRequest:
    return EvalRequest(kernel=SHAPE.spec, candidate=KernelSource(path=candidate, label="candidate"),
                       baseline=KernelSource(path=SHAPE.op("sglang_pick"), label="sglang"),
                       shapes=[SHAPE.shape(1), SHAPE.shape(64)], dtypes=["bfloat16"], edge_cases=True, time=time)


def test_a_config_passes_the_fp8_evaluator_and_is_timed_against_sglangs_pick():
    result = evaluate(_request(SHAPE.op("config_m16n64k128g1w4s3")))
    assert result.ok, result.reason
    assert all(r.correct and r.speedup for r in result.shapes), [(r.shape, r.reason) for r in result.shapes]

