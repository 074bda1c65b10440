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

from astra_sglang.harness.records import EvalRequest, EvalResult, KernelSource
from astra_sglang.triton.attn_op import PREFIX, table_name
from astra_sglang.triton.attn_space import SMEM_BYTES, AttnConfig, AttnShape, neighbors, space
from astra_sglang.triton.cache import CacheKey, Measurement
from astra_sglang.triton.results import BucketResult
from astra_sglang.triton.tune import WIN_MARGIN, MoeTuner

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
                        baseline=s.picks[bucket].code())

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

    def _absorb(self, table: dict[Bucket, AttnConfig], run: str, result: EvalResult) -> None:
        rows = {tuple(r.shape[:2]): r for r in result.shapes}
        lost = False  # the first bucket without a row of a crashed evaluation is the one it died in
        for bucket in sorted(table):
            code = table[bucket].code()
            row = rows.get(bucket)
            if row is None:
                if not result.ok and not lost and result.stage in ("crash", "timeout"):
                    lost = True
                    self._record(bucket, Measurement(config=code, ok=False, reason=result.reason[:300], run=run))
                continue
            ok = row.correct is True and row.speedup is not None and row.candidate is not None
            reason = row.reason or ("" if row.covered else "declined: does not fit this GPU")
            self._record(bucket, Measurement(
                config=code, ok=ok, speedup=row.speedup if ok else None,
                candidate_us=row.candidate.median_us if row.candidate else None,
                baseline_us=row.baseline.median_us if row.baseline else None, reason=reason[:300], run=run))

    def chosen(self) -> dict[Bucket, AttnConfig]:
        out = {}
        for bucket in self.setup.buckets:
            best = self.best(bucket)
            won = best is not None and best.speedup >= WIN_MARGIN
            out[bucket] = AttnConfig.from_code(self.setup.kernel, best.config) if won else self.setup.picks[bucket]
        return out

    def finish(self, final: EvalResult | None, table: dict[Bucket, AttnConfig]) -> list[BucketResult]:
        """Bucket results; a bucket whose config failed or lost in the final evaluation gets SGLang's pick."""
        rows = {tuple(r.shape[:2]): r for r in final.shapes} if final else {}
        out = []
        for bucket in self.setup.buckets:
            pick = self.setup.picks[bucket]
            best = self.best(bucket)
            measured = self.measured[bucket].values()
            row = rows.get(bucket)
            tuned = table[bucket] != pick
            verdict = "tuned" if tuned else ("sglang-best" if best else
                                             ("no-valid-config" if measured else "not-measured"))
            final_speedup = row.speedup if row is not None and row.correct else None
            if tuned and (final_speedup is None or final_speedup < 1.0):
                verdict, table[bucket] = "sglang-best", pick
            out.append(BucketResult(
                tokens=bucket[0], bucket=bucket, pick=pick.code(), pick_source="SGLang's launcher",
                best=best.config if best else None, best_speedup=best.speedup if best else None,
                measured=len(measured), failed=sum(1 for m in measured if not m.ok), chosen=table[bucket].code(),
                verdict=verdict, final_speedup=final_speedup,
                final_us=row.candidate.median_us if row is not None and row.candidate else None,
                pick_us=row.baseline.median_us if row is not None and row.baseline else None))
        return out
