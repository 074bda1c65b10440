"""SGLang's Triton attention launch configs as an op of the generic bucket tuner (optimize/tuner/bucket.py:
rounds of isolated evaluations, one config per bucket per evaluation, the cache, the margin a config must win by,
the final evaluation), with attention's buckets ((batch, kv length) for decode, (extend, prefix length) for
extend), configs (attn_space) and evaluator op (attn_op). Round 1 tries the neighbours of SGLang's pick (one knob
one step), later rounds climb from each bucket's best so far, a fixed-seed sample of the filtered space fills
the rest.

Buckets that share a first size are one launch key and get one config: a CUDA graph fixes a decode launch's
config at its batch size while the kv length changes at every replay, and an extend launch is matched on its
extend length, not its prefix. A decode config chosen at 64x4096 alone (1.22x there) measured 0.86x at 64x512 and
0.77-0.96x at every other bucket (H100, 2026-11-25, benchmarks/results/2026-11-25-h100/attention). So after the
search each key's winners are measured at the key's other buckets (`settle`), and a key takes the config with
the best geomean over its buckets only where it is not slower than SGLang's pick at any of them.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from astra_sglang.harness.records import EvalRequest, KernelSource
from astra_sglang.optimize.tuner.bucket import Batch, BucketTuner
from astra_sglang.optimize.tuner.cache import CacheKey, Measurement, TuneCache
from astra_sglang.triton.attention.op import PREFIX, table_name
from astra_sglang.triton.attention.space import SMEM_BYTES, AttnConfig, AttnShape, neighbors, space

OP = "py:astra_sglang.triton.attention.op:"
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


class AttnOp:
    def __init__(self, setup: AttnSetup):
        self.setup = setup
        self.kernel = setup.kernel
        self.buckets = setup.buckets

    def key(self, bucket: Bucket) -> CacheKey:
        s = self.setup
        shape = (*bucket, s.shape.heads, s.shape.kv_heads, s.shape.head_dim, s.splits)
        return CacheKey(gpu=s.gpu, triton=s.triton, source_hash=s.source_hash, shape=shape, dtype=s.shape.dtype,
                        baseline=self.pick(bucket).code())

    def spec_shape(self, bucket: Bucket) -> tuple[int, ...]:
        s = self.setup.shape
        return (*bucket, s.heads, s.kv_heads, s.head_dim)

    def pick(self, bucket: Bucket) -> AttnConfig:
        return self.setup.picks[bucket]

    def pick_source(self, bucket: Bucket) -> str:
        return "SGLang's launcher"

    def from_code(self, code: str) -> AttnConfig:
        return AttnConfig.from_code(self.setup.kernel, code)

    def bucket_of(self, shape) -> Bucket:
        return tuple(shape[:2])

    def launch_key(self, bucket: Bucket) -> int:
        """Decode: the batch size (a CUDA graph fixes the config there); extend: the extend length."""
        return bucket[0]

    def result_fields(self, bucket: Bucket) -> dict:
        return {"tokens": bucket[0], "bucket": bucket}

    def request(self, table: dict[Bucket, AttnConfig], label: str, final: bool, timeout_s: float) -> EvalRequest:
        s = self.setup
        baseline = KernelSource(path=f"{OP}{PREFIX[s.kernel]}_sglang_pick", label="sglang")
        return EvalRequest(kernel=s.kernel, candidate=KernelSource(path=OP + table_name(s.kernel, table), label=label),
                           baseline=baseline, shapes=[self.spec_shape(b) for b in sorted(table)],
                           dtypes=[s.shape.dtype], edge_cases=final, timeout_s=timeout_s)

    def proposals(self, bucket: Bucket, best: Measurement | None, first: bool) -> list[AttnConfig]:
        s = self.setup
        pick = s.picks[bucket]
        origin = AttnConfig.from_code(s.kernel, best.config) if best and best.speedup > 1.0 else pick
        ordered = neighbors(pick, s.shape, s.smem) if first else []
        ordered += neighbors(origin, s.shape, s.smem)
        rest, _ = space(s.kernel, s.shape, s.smem)
        random.Random(bucket[0] * 1_000_003 + bucket[1]).shuffle(rest)
        return ordered + rest


def attn_tuner(setup: AttnSetup, batch: Batch, cache: TuneCache | None = None, **kw) -> BucketTuner:
    return BucketTuner(AttnOp(setup), batch, cache, **kw)
