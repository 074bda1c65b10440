"""On a GPU with SGLang: the split-K variant of SGLang's installed kernel through the strict evaluator, as the tuner
and the bar run it (isolated process, fp64 reference, guards, timed launches re-checked), against SGLang's own pick
and kernel; and an agent-registered variant whose pointers advance by one tile instead of SPLIT_K fails the checks."""
from __future__ import annotations

import importlib.util

import pytest

from astra_sglang.harness.isolate import evaluate
from astra_sglang.harness.records import EvalRequest, KernelSource
from astra_sglang.triton.moe import sources
from astra_sglang.triton.moe.knobs import SplitK, Variant
from astra_sglang.triton.moe.source_op import candidate_path
from astra_sglang.triton.moe.space import MoeConfig

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(importlib.util.find_spec("sgl_kernel") is None, reason="needs SGLang's CUDA build")]
SHAPES = [(1, 8, 1024, 512, 2), (3, 8, 1024, 512, 2)]
CONFIG = MoeConfig(16, 64, 64, 1, 4, 3)
PICK = KernelSource(path="py:astra_sglang.triton.moe.op:sglang_pick", label="sglang")


def _request(table, source="splitk", time=True):
    return EvalRequest(kernel="fused_moe", candidate=KernelSource(path=candidate_path(table, source), label=source),
                       baseline=PICK, shapes=SHAPES, dtypes=["bfloat16", "float16"], edge_cases=False, time=time)


def test_split_k_passes_the_evaluator():
    result = evaluate(_request({1: Variant(CONFIG, SplitK(1, 4)), 3: Variant(CONFIG, SplitK(2, 2))}))
    assert result.ok, result.reason
    assert all(r.correct and r.speedup for r in result.shapes), [(r.shape, r.reason) for r in result.shapes]


def test_a_wrong_agent_variant_fails_the_evaluator():
    text = sources.splitk_source().path.read_text()
    broken = sources.register(text.replace("BLOCK_SIZE_K * SPLIT_K * stride_ak", "BLOCK_SIZE_K * stride_ak"))
    result = evaluate(_request({1: Variant(CONFIG, SplitK(1, 4))}, broken.name, time=False))
    assert not result.ok and any(r.correct is False for r in result.shapes)
