"""The config tuner with a source knob: configs and their split-K values searched side by side through the same
isolated evaluator, against SGLang's own pick and kernel, and written back as a source patch.

`KnobTuner` is the config tuner (tune.MoeTuner) over knobs.Variant instead of MoeConfig: every candidate is a
`py:...source_op:table_...` evaluation, timed interleaved with SGLang's pick in one process like any config.
Round 1 tries, at each batch size, the splits worth measuring (knobs.extend) of SGLang's pick and of SGLang's
shipped configs for the shape; later rounds climb from the best so far: its config's neighbours at its split,
and its split halved and doubled. Measurements are cached under the variant's text hash besides SGLang's.
"""
from __future__ import annotations

from dataclasses import replace

from astra_sglang.harness.records import EvalRequest, KernelSource
from astra_sglang.patching.manifest import MeasuredShape
from astra_sglang.triton.cache import CacheKey
from astra_sglang.triton.moe.knobs import SPLITS, Variant
from astra_sglang.triton.moe.provider import KernelSourceProvider
from astra_sglang.triton.moe.source_op import candidate_path
from astra_sglang.triton.moe.source_patch import SourceRun, write_source_patch
from astra_sglang.triton.results import TuneResult
from astra_sglang.triton.space import neighbors
from astra_sglang.triton.tune import MoeTuner


class KnobTuner(MoeTuner):
    def __init__(self, provider: KernelSourceProvider, *args, **kwargs):
        self.provider = provider  # before MoeTuner's cache lookups, which key by it
        super().__init__(*args, **kwargs)

    def key(self, tokens: int) -> CacheKey:
        key = super().key(tokens)
        return key.model_copy(update={"source_hash": f"{key.source_hash}+{self.provider.name}:"
                                                     f"{self.provider.source_hash}"})

    def pick(self, tokens: int) -> Variant:
        return Variant(self.setup.picks[tokens].config)

    def from_code(self, code: str) -> Variant:
        return Variant.from_code(code)

    def _splits_around(self, variant: Variant) -> list[Variant]:
        out = []
        for gemm in ("up", "down"):
            value = getattr(variant.split, gemm)
            for other in (value // 2, value * 2):
                if other in SPLITS:
                    out.append(Variant(variant.config, replace(variant.split, **{gemm: other})))
        return out

    def propose(self, tokens: int, first: bool) -> list[Variant]:
        s = self.setup
        pick = self.pick(tokens)
        if first:
            ordered = []
            for config in [pick.config, *s.seeds.get(tokens, [])]:
                ordered += self.provider.extend(config, tokens, s.shape)
        else:
            best = self.best(tokens)
            origin = Variant.from_code(best.config) if best and best.speedup > 1.0 else pick
            ordered = self._splits_around(origin) + [Variant(c, origin.split) for c in neighbors(origin.config, s.smem)]
        out: list[Variant] = []
        for variant in ordered:
            if variant.code() in self.measured[tokens] or variant == pick or variant in out:
                continue
            out.append(variant)
            if len(out) == self.width:
                break
        return out

    def request(self, table: dict[int, Variant], label: str, final: bool = False) -> EvalRequest:
        req = super().request(table, label, final)
        return req.model_copy(update={"candidate": KernelSource(path=candidate_path(table, self.provider.name),
                                                                label=label)})


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
    from astra_sglang.triton import moe_configs

    return str(folder / "configs" / moe_configs.version_dir(result.triton) /
               moe_configs.file_name(shape.experts, shape.inter, result.gpu))
