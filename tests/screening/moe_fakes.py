"""Fakes shared by the two-tier tests: the expert shape, the facts of a GPU, and a strict evaluator that agrees
with the screening landscape (the cost model standing in for the GPU)."""
from __future__ import annotations

from astra_sglang.optimize.tuner.moe_run import Facts
from astra_sglang.optimize.tuner.moe_simulate import SimulatedEvaluator, landscape_us
from astra_sglang.triton.moe.shapes import MoeShape
from astra_sglang.triton.moe.space import MoeConfig

SHAPE = MoeShape(128, 768, 2048, 8)
GPU = "NVIDIA H100 80GB HBM3"
FACTS = Facts(gpu=GPU, smem=227 * 1024, triton="3.6.0", sglang="0.5.17", source_hash="ef" * 32)
PICK = MoeConfig(64, 64, 32, 8)
ARGS = dict(experts=128, inter=768, hidden=2048, topk=8, gpu=GPU)
LANDSCAPE = "astra_sglang.optimize.tuner.moe_simulate:landscape_us"


def us_of(config: MoeConfig, tokens: int) -> float:
    return landscape_us(config.code(), tokens, **ARGS)


def Strict() -> SimulatedEvaluator:  # noqa: N802 - reads as the evaluator it stands in for
    return SimulatedEvaluator(SHAPE, GPU, lambda tokens: PICK, wall_s=40.0)
