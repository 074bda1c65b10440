"""The no-LLM tuner of SGLang's Triton attention launch configs, per bucket, against SGLang's own pick.

The fused MoE tuner's machinery (tune.MoeTuner: rounds of isolated evaluations, one config per bucket per
evaluation, the cache, the margin a config must win by, the final evaluation) with attention's buckets
((batch, kv length) for decode, (extend, prefix length) for extend), configs (attn_space) and evaluator op
(attn_op). Round 1 tries the neighbours of SGLang's pick (one knob one step), later rounds climb from each
bucket's best so far, a fixed-seed sample of the filtered space fills the rest.

Buckets that share a first size are one launch key and get one config: a CUDA graph fixes a decode launch's
config at its batch size while the kv length changes at every replay, and an extend launch is matched on its
extend length, not its prefix. A decode config chosen at 64x4096 alone (1.22x there) measured 0.86x at 64x512 and
0.77-0.96x at every other bucket (H100, 2026-11-25, benchmarks/results/2026-11-25-h100/attention). So after the
search each key's winners are measured at the key's other buckets (`settle`), and a key takes the config with
the best geomean over its buckets only where it is not slower than SGLang's pick at any of them.
"""
from __future__ import annotations

import math
import random
from collections import defaultdict
from dataclasses import dataclass

from astra_sglang.harness.records import EvalRequest, KernelSource
from astra_sglang.optimize.tuner.cache import CacheKey
from astra_sglang.optimize.tuner.moe_tune import WIN_MARGIN, MoeTuner
from astra_sglang.triton.attention.op import PREFIX, table_name
from astra_sglang.triton.attention.space import SMEM_BYTES, AttnConfig, AttnShape, neighbors, space
from astra_sglang.triton.results import BucketResult

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

    # -- one config per launch key ------------------------------------------------------------------------
    def keys(self) -> dict[int, list[Bucket]]:
        """First size -> its buckets (a decode batch size's kv lengths, an extend length's prefixes)."""
        out: dict[int, list[Bucket]] = defaultdict(list)
        for b in self.setup.buckets:
            out[b[0]].append(b)
        return dict(out)

    def settle(self) -> int:
        """Each key's winners (configs that beat SGLang's pick by WIN_MARGIN at one of its buckets) measured at
        the key's other buckets: evaluation j gives every bucket its j-th such config not measured there yet."""
        proposals: dict[Bucket, list[AttnConfig]] = {}
        for members in self.keys().values():
            winners = dict.fromkeys(m.config for b in members if (m := self.best(b)) and m.speedup >= WIN_MARGIN)
            for b in members:
                proposals[b] = [self.from_code(c) for c in winners
                                if c not in self.measured[b] and c != self.pick(b).code()]
        if not any(proposals.values()):
            return 0
        self.echo("settle: each launch key's winners at its other buckets (one config serves them all)")
        return self.evaluate_round("settle", proposals)

    def _speedups(self, code: str, members: list[Bucket]) -> list[float] | None:
        out = []
        for b in members:
            m = self.measured[b].get(code)
            if code == self.pick(b).code():
                out.append(1.0)
            elif m is None or not m.ok or not m.speedup:
                return None  # not measured (or failed) at one of the key's buckets: not a candidate
            else:
                out.append(m.speedup)
        return out

    def chosen(self) -> dict[Bucket, AttnConfig]:
        """Per key: the config with the best geomean speedup over its buckets among those measured at all of them,
        where that geomean is at least WIN_MARGIN and no bucket is slower than SGLang's pick; else SGLang's pick."""
        out: dict[Bucket, AttnConfig] = {}
        for members in self.keys().values():
            scored = []
            for code in {c for b in members for c in self.measured[b]}:
                speeds = self._speedups(code, members)
                if speeds and min(speeds) >= 1.0:
                    scored.append((math.exp(sum(map(math.log, speeds)) / len(speeds)), code))
            best = max(scored, default=None)
            for b in members:
                out[b] = self.from_code(best[1]) if best and best[0] >= WIN_MARGIN else self.pick(b)
        return out

    def finish(self, final, table) -> list[BucketResult]:
        """As MoeTuner's, and a key whose config lost at any of its buckets in the final evaluation keeps SGLang's
        pick at all of them."""
        before = dict(table)
        out = super().finish(final, table)
        lost = {b[0] for b in before if before[b] != self.pick(b) and table[b] == self.pick(b)}
        for r in out:
            bucket = tuple(r.bucket)
            if bucket[0] in lost and r.verdict == "tuned":
                pick = self.pick(bucket)
                r.verdict, r.chosen, table[bucket] = "sglang-best", pick.code(), pick
        return out
