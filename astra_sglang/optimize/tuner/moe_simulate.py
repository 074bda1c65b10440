"""Fused MoE on simulated GPUs: the cost model's predictions (order.py) as the times the screening tier measures
(`landscape_us`, screen_simulate's landscape) and as the strict evaluator's (`SimulatedEvaluator`), for the tests
and the benchmark's --simulate. Nothing here is a measurement."""
from __future__ import annotations

from typing import Callable

from astra_sglang.harness.records import EvalRequest, EvalResult, ShapeResult, Timing
from astra_sglang.optimize.tuner.moe_order import gpu_model, predict_us
from astra_sglang.triton.moe import configs as moe_configs
from astra_sglang.triton.moe import source_op
from astra_sglang.triton.moe.op import parse_table
from astra_sglang.triton.moe.shapes import MoeShape
from astra_sglang.triton.moe.space import MoeConfig


def landscape_us(config: str, tokens: int, experts: int, inter: int, hidden: int, topk: int, gpu: str) -> float:
    base = MoeConfig.from_code(config.partition("+")[0])
    return predict_us(base, tokens, MoeShape(experts, inter, hidden, topk), gpu_model(gpu))


def _table(path: str) -> dict[int, MoeConfig]:
    """A candidate's table of configs: a config table, or a source knob's table of variants (their configs: the
    landscape knows no splits)."""
    name = path.rsplit(":", 1)[1]
    if path.startswith(source_op.MODULE):
        return {t: v.config for t, v in source_op.parse(name)[1].items()}
    return parse_table(name)


class SimulatedEvaluator:
    """The isolated evaluator's answers: every config correct, its time and SGLang's pick's (`pick(tokens)`) the
    cost model's."""

    def __init__(self, shape: MoeShape, gpu: str, pick: Callable[[int], MoeConfig], wall_s: float = 0.0):
        self.shape, self.gpu, self.pick, self.wall_s = shape, gpu, pick, wall_s
        self.requests: list[EvalRequest] = []

    def us(self, config: MoeConfig, tokens: int) -> float:
        s = self.shape
        return landscape_us(config.code(), tokens, s.experts, s.inter, s.hidden, s.topk, self.gpu)

    def __call__(self, reqs: list[EvalRequest]) -> list[EvalResult]:
        out = []
        for req in reqs:
            self.requests.append(req)
            table = _table(req.candidate.path)
            rows = []
            for shape in req.shapes:
                tokens = shape[0]
                cand = self.us(table[moe_configs.nearest(table, tokens)], tokens)
                base = self.us(self.pick(tokens), tokens)
                rows.append(ShapeResult(shape=shape, dtype=self.shape.dtype, correct=True, speedup=base / cand,
                                        candidate=Timing(median_us=cand, p10_us=cand, p90_us=cand),
                                        baseline=Timing(median_us=base, p10_us=base, p90_us=base)))
            out.append(EvalResult(kernel=req.kernel, candidate=req.candidate.name(), ok=True, stage="done",
                                  shapes=rows, wall_s=self.wall_s))
        return out
