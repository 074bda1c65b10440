"""Fused MoE as an op of the generic bucket tuner (optimize/tuner/bucket.py): batch sizes as buckets, SGLang's
pick per batch size as the baseline, `py:` candidates of the evaluator (moe_op) for tables of configs.

Without the screening tier the search walks the space itself (`MoeOp.proposals`): round 1 starts where tuning
elsewhere ended, the configs SGLang ships for this expert shape on other GPUs and Triton versions (nearest
key), then the neighbours of SGLang's pick (one knob one step); later rounds climb from each batch size's best
so far; a fixed-seed sample of the pruned space fills what is left (space.py). With it, the screening tier's
finalists are the only proposals (bucket.Finalists). Every batch size is its own launch key (SGLang's file
holds one config per key).
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

from astra_sglang.harness.records import EvalRequest, KernelSource
from astra_sglang.optimize.tuner.bucket import WIN_MARGIN, Batch, BucketTuner, Proposer
from astra_sglang.optimize.tuner.cache import CacheKey, Measurement, TuneCache
from astra_sglang.triton.moe.configs import Pick
from astra_sglang.triton.moe.op import table_name
from astra_sglang.triton.moe.shapes import MoeShape
from astra_sglang.triton.moe.space import SMEM_BYTES, MoeConfig, neighbors, space

__all__ = ["WIN_MARGIN", "Batch", "MoeOp", "Setup", "moe_tuner"]


@dataclass
class Setup:
    shape: MoeShape
    buckets: list[int]
    picks: dict[int, Pick]
    gpu: str
    triton: str
    source_hash: str
    seeds: dict[int, list[MoeConfig]] = field(default_factory=dict)
    """First guesses per batch size (SGLang's shipped configs for this expert shape elsewhere)."""
    smem: int = SMEM_BYTES


class MoeOp:
    def __init__(self, setup: Setup):
        self.setup = setup
        self.buckets = setup.buckets
        self.kernel = setup.shape.spec
        """The strict evaluator's spec for the shape's precision (fused_moe, fused_moe_fp8)."""

    def key(self, tokens: int) -> CacheKey:
        s = self.setup
        return CacheKey(gpu=s.gpu, triton=s.triton, source_hash=s.source_hash, shape=s.shape.shape(tokens),
                        dtype=s.shape.precision, baseline=self.pick(tokens).code())

    def pick(self, tokens: int) -> MoeConfig:
        return self.setup.picks[tokens].config

    def pick_source(self, tokens: int) -> str:
        return self.setup.picks[tokens].describe()

    def from_code(self, code: str) -> MoeConfig:
        return MoeConfig.from_code(code)

    def bucket_of(self, shape) -> int:
        return shape[0]

    def launch_key(self, tokens: int) -> int:
        return tokens

    def result_fields(self, tokens: int) -> dict:
        return {"tokens": tokens}

    def request(self, table: dict[int, MoeConfig], label: str, final: bool, timeout_s: float) -> EvalRequest:
        s = self.setup
        return EvalRequest(kernel=s.shape.spec, candidate=KernelSource(path=s.shape.op(table_name(table)), label=label),
                           baseline=KernelSource(path=s.shape.op("sglang_pick"), label="sglang"),
                           shapes=[s.shape.shape(t) for t in sorted(table)],
                           dtypes=[s.shape.dtype], edge_cases=final, timeout_s=timeout_s)

    def proposals(self, tokens: int, best: Measurement | None, first: bool) -> list[MoeConfig]:
        s = self.setup
        pick = s.picks[tokens].config
        origin = MoeConfig.from_code(best.config) if best and best.speedup > 1.0 else pick
        ordered = (s.seeds.get(tokens, []) + neighbors(pick, s.smem)) if first else []
        ordered += neighbors(origin, s.smem)
        rest = space(tokens, s.shape.experts, s.shape.topk, s.smem)
        random.Random(tokens).shuffle(rest)
        return ordered + rest


def moe_tuner(setup: Setup, batch: Batch, cache: TuneCache | None = None, proposer: Proposer | None = None,
              **kw) -> BucketTuner[int, MoeConfig]:
    return BucketTuner(MoeOp(setup), batch, cache, proposer=proposer, **kw)
