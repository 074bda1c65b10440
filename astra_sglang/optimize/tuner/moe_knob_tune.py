"""Fused MoE with a source knob as an op of the generic bucket tuner: configs and their split-K values searched
side by side through the same isolated evaluator, against SGLang's own pick and kernel, and written back as a
source patch.

`KnobOp` is fused MoE's op (moe_tune.MoeOp) over knobs.Variant instead of MoeConfig: every candidate is a
`py:...source_op:table_...` evaluation, timed interleaved with SGLang's pick in one process like any config.
Without the screening tier, round 1 tries, at each batch size, the splits worth measuring (knobs.extend) of
SGLang's pick and of SGLang's shipped configs for the shape; later rounds climb from the best so far: its config's
neighbours at its split, and its split halved and doubled. With it, the screening tier's finalists (variants
among them, moe_two_tier) are the only proposals. Measurements are cached under the variant's text hash besides
SGLang's.
"""
from __future__ import annotations

from dataclasses import replace

from astra_sglang.harness.records import EvalRequest, KernelSource
from astra_sglang.optimize.tuner.bucket import Batch, BucketTuner, Proposer
from astra_sglang.optimize.tuner.cache import CacheKey, Measurement, TuneCache
from astra_sglang.optimize.tuner.moe_tune import MoeOp, Setup
from astra_sglang.patchset.manifest import MeasuredShape
from astra_sglang.triton.moe import configs as moe_configs
from astra_sglang.triton.moe.knobs import SPLITS, Variant
from astra_sglang.triton.moe.provider import KernelSourceProvider
from astra_sglang.triton.moe.source_op import candidate_path
from astra_sglang.triton.moe.source_patch import SourceRun, write_source_patch
from astra_sglang.triton.moe.space import neighbors
from astra_sglang.triton.results import TuneResult


def keyed_hash(source_hash: str, provider: KernelSourceProvider) -> str:
    """SGLang's source hash with the variant's: what a measurement with the variant is valid for."""
    return f"{source_hash}+{provider.name}:{provider.source_hash}"


class KnobOp(MoeOp):
    def __init__(self, provider: KernelSourceProvider, setup: Setup):
        super().__init__(setup)
        self.provider = provider

    def key(self, tokens: int) -> CacheKey:
        key = super().key(tokens)
        return key.model_copy(update={"source_hash": keyed_hash(key.source_hash, self.provider)})

    def pick(self, tokens: int) -> Variant:
        return Variant(self.setup.picks[tokens].config)

    def from_code(self, code: str) -> Variant:
        return Variant.from_code(code)

    def request(self, table: dict[int, Variant], label: str, final: bool, timeout_s: float) -> EvalRequest:
        req = super().request(table, label, final, timeout_s)
        return req.model_copy(update={"candidate": KernelSource(path=candidate_path(table, self.provider.name),
                                                                label=label)})

    def proposals(self, tokens: int, best: Measurement | None, first: bool) -> list[Variant]:
        s = self.setup
        pick = self.pick(tokens)
        if first:
            return [v for config in [pick.config, *s.seeds.get(tokens, [])]
                    for v in self.provider.extend(config, tokens, s.shape)]
        origin = Variant.from_code(best.config) if best and best.speedup > 1.0 else pick
        return _splits_around(origin) + [Variant(c, origin.split) for c in neighbors(origin.config, s.smem)]


def _splits_around(variant: Variant) -> list[Variant]:
    out = []
    for gemm in ("up", "down"):
        value = getattr(variant.split, gemm)
        for other in (value // 2, value * 2):
            if other in SPLITS:
                out.append(Variant(variant.config, replace(variant.split, **{gemm: other})))
    return out


def knob_tuner(provider: KernelSourceProvider, setup: Setup, batch: Batch, cache: TuneCache | None = None,
               proposer: Proposer | None = None, **kw) -> BucketTuner[int, Variant]:
    return BucketTuner(KnobOp(provider, setup), batch, cache, proposer=proposer, **kw)


def write_patch(patches_dir, result: TuneResult, shape, table: dict, provider: KernelSourceProvider,
                run_id: str) -> str:
    """The tuned variants (SGLang's picks at every other key of `table`) as a source patch; returns its file."""
    tuned = [b for b in result.buckets if b.verdict == "tuned"]
    measured = [MeasuredShape(shape=shape.shape(b.tokens), dtype=shape.dtype, candidate_us=b.final_us,
                              baseline_us=b.pick_us, speedup=b.final_speedup)
                for b in tuned if b.final_us and b.pick_us and b.final_speedup]
    variants = {m: v if isinstance(v, Variant) else Variant(v) for m, v in table.items()}
    run = SourceRun(gpu=result.gpu, triton=result.triton, sglang=result.sglang, source=provider.source, run_id=run_id)
    folder = write_source_patch(patches_dir, shape, variants, run, [b.tokens for b in tuned], measured)
    return str(folder / "configs" / moe_configs.version_dir(result.triton) /
               moe_configs.file_name(shape.experts, shape.inter, result.gpu))
