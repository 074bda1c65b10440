"""Fakes shared by the two-tier tests: the expert shape, the facts of a GPU, and a strict evaluator that agrees
with the screening landscape (the cost model standing in for the GPU)."""
from __future__ import annotations

from astra_sglang.harness.records import EvalResult, ShapeResult, Timing
from astra_sglang.triton import moe_configs
from astra_sglang.triton.moe.order import landscape_us
from astra_sglang.triton.moe_op import parse_table
from astra_sglang.triton.moe_shapes import MoeShape
from astra_sglang.triton.run import Facts
from astra_sglang.triton.space import MoeConfig

SHAPE = MoeShape(128, 768, 2048, 8)
GPU = "NVIDIA H100 80GB HBM3"
FACTS = Facts(gpu=GPU, smem=227 * 1024, triton="3.6.0", sglang="0.5.17", source_hash="ef" * 32)
PICK = MoeConfig(64, 64, 32, 8)
ARGS = dict(experts=128, inter=768, hidden=2048, topk=8, gpu=GPU)


def us_of(config: MoeConfig, tokens: int) -> float:
    return landscape_us(config.code(), tokens, **ARGS)


class Strict:
    """The isolated evaluator, agreeing with the screening landscape."""

    def __init__(self):
        self.requests = []

    def __call__(self, reqs):
        out = []
        for req in reqs:
            self.requests.append(req)
            table = parse_table(req.candidate.path.rsplit(":", 1)[1])
            rows = []
            for shape in req.shapes:
                config, tokens = table[moe_configs.nearest(table, shape[0])], shape[0]
                cand, base = us_of(config, tokens), us_of(PICK, tokens)
                rows.append(ShapeResult(shape=shape, dtype="bfloat16", correct=True, speedup=base / cand,
                                        candidate=Timing(median_us=cand, p10_us=cand, p90_us=cand),
                                        baseline=Timing(median_us=base, p10_us=base, p90_us=base)))
            out.append(EvalResult(kernel=req.kernel, candidate=req.candidate.name(), ok=True, stage="done",
                                  shapes=rows, wall_s=40.0))
        return out
