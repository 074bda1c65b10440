"""The no-LLM tuner of SGLang's Triton attention launch configs, per bucket, against SGLang's own pick.

The fused MoE tuner's machinery (tune.MoeTuner: rounds of isolated evaluations, one config per bucket per
evaluation, the cache, the margin a config must win by, the final evaluation) with attention's buckets
((batch, kv length) for decode, (extend, prefix length) for extend), configs (attn_space) and evaluator op
(attn_op). Round 1 tries the neighbours of SGLang's pick (one knob one step), later rounds climb from each
bucket's best so far, a fixed-seed sample of the filtered space fills the rest.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from astra_sglang.harness.records import EvalRequest, KernelSource
from astra_sglang.triton.attn_op import PREFIX, table_name
from astra_sglang.triton.attn_space import SMEM_BYTES, AttnConfig, AttnShape, neighbors, space
from astra_sglang.triton.cache import CacheKey
from astra_sglang.triton.tune import MoeTuner

OP = "py:astra_sglang.triton.attn_op:"
Bucket = tuple[int, int]


@dataclass
class AttnSetup:
    kernel: str
    shape: AttnShape
    buckets: list[Bucket]
    picks: dict[Bucket, AttnConfig]
    gpu: str
    triton: str
    source_hash: str
    splits: int = 8
    smem: int = SMEM_BYTES


class AttnTuner(MoeTuner):
    setup: AttnSetup

    def key(self, bucket: Bucket) -> CacheKey:
        s = self.setup
        shape = (*bucket, s.shape.heads, s.shape.kv_heads, s.shape.head_dim, s.splits)
        return CacheKey(gpu=s.gpu, triton=s.triton, source_hash=s.source_hash, shape=shape, dtype=s.shape.dtype,
                        baseline=self.pick(bucket).code())

    def spec_shape(self, bucket: Bucket) -> tuple[int, ...]:
        s = self.setup.shape
        return (*bucket, s.heads, s.kv_heads, s.head_dim)

    def propose(self, bucket: Bucket, first: bool) -> list[AttnConfig]:
        s = self.setup
        pick = s.picks[bucket]
        best = self.best(bucket)
        origin = AttnConfig.from_code(s.kernel, best.config) if best and best.speedup > 1.0 else pick
        ordered = neighbors(pick, s.shape, s.smem) if first else []
        ordered += neighbors(origin, s.shape, s.smem)
        rest, _ = space(s.kernel, s.shape, s.smem)
        random.Random(bucket[0] * 1_000_003 + bucket[1]).shuffle(rest)
        out: list[AttnConfig] = []
        for config in ordered + rest:
            if config.code() in self.measured[bucket] or config == pick or config in out:
                continue
            out.append(config)
            if len(out) == self.width:
                break
        return out

    def request(self, table: dict[Bucket, AttnConfig], label: str, final: bool = False) -> EvalRequest:
        s = self.setup
        baseline = KernelSource(path=f"{OP}{PREFIX[s.kernel]}_sglang_pick", label="sglang")
        return EvalRequest(kernel=s.kernel, candidate=KernelSource(path=OP + table_name(s.kernel, table), label=label),
                           baseline=baseline, shapes=[self.spec_shape(b) for b in sorted(table)],
                           dtypes=[s.shape.dtype], edge_cases=final, timeout_s=self.timeout_s)

    def pick(self, bucket: Bucket) -> AttnConfig:
        return self.setup.picks[bucket]

    def pick_source(self, bucket: Bucket) -> str:
        return "SGLang's launcher"

    def from_code(self, code: str) -> AttnConfig:
        return AttnConfig.from_code(self.setup.kernel, code)

    def bucket_of(self, shape) -> Bucket:
        return tuple(shape[:2])

    def result_fields(self, bucket: Bucket) -> dict:
        return {"tokens": bucket[0], "bucket": bucket}
