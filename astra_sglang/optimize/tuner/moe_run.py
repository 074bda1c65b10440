"""One fused MoE tuning run end to end: what SGLang picks, the search, the final evaluation, the results
(tune.json, tune.md) and, where a config beat SGLang's, the config patch."""
from __future__ import annotations

import datetime as dt
import json
import time
from dataclasses import dataclass, replace
from pathlib import Path

from astra_sglang.errors import AstraError
from astra_sglang.optimize.tuner.bucket import Batch, BucketTuner, Finalists, wall_text
from astra_sglang.optimize.tuner.cache import TuneCache
from astra_sglang.optimize.tuner.moe_knob_tune import keyed_hash, knob_tuner, write_patch
from astra_sglang.optimize.tuner.moe_tune import Setup, moe_tuner
from astra_sglang.optimize.tuner.moe_two_tier import ScreenOptions
from astra_sglang.optimize.tuner.report import write_report
from astra_sglang.triton.moe import configs as moe_configs
from astra_sglang.triton.moe.shapes import MoeShape
from astra_sglang.triton.moe.space import SMEM_BYTES, MoeConfig
from astra_sglang.triton.results import TuneResult

KERNEL_FILE = "kernels/ops/moe/fused_moe_triton_kernels.py"
LAUNCHER_FILES = ("srt/layers/moe/moe_runner/triton_utils/fused_moe.py",)


@dataclass(frozen=True)
class Facts:
    """What the results are valid for (the cache's key, the report's header)."""

    gpu: str
    smem: int
    triton: str
    sglang: str
    source_hash: str


def facts_here() -> Facts:
    """This machine's GPU, Triton, SGLang and the installed fused MoE kernel's source hash."""
    import torch

    from astra_sglang.extraction.sources import _version
    from astra_sglang.extraction.triton.discover import source_hash

    if not torch.cuda.is_available():
        raise AstraError("tuning needs a CUDA GPU: every config is checked and timed on it; none is visible here")
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    root = moe_configs.package_dir()
    return Facts(gpu=torch.cuda.get_device_name(), smem=getattr(props, "shared_memory_per_block_optin", SMEM_BYTES),
                 triton=moe_configs.triton_version(), sglang=_version(root, "sglang"),
                 source_hash=source_hash([root / KERNEL_FILE, *(root / f for f in LAUNCHER_FILES)]))


@dataclass
class TuneOptions:
    rounds: int = 2
    width: int = 4
    budget_s: float | None = None
    """Seconds for the search (the final evaluation is reserved inside it)."""
    timeout_s: float = 900.0
    use_cache: bool = True
    patches_dir: Path | None = None
    command: str = ""
    screen: ScreenOptions | None = None
    """The screening tier ahead of the strict one (its finalists are the search's only proposals)."""
    source_knob: str = ""
    """A source variant of SGLang's kernel searched beside the configs ("splitk", or a registered agent's
    "agent-<hash>"): written as a source patch (kind triton-source) instead of a config patch."""


def file_table(shape: MoeShape, chosen: dict[int, MoeConfig], picks_at) -> dict[int, MoeConfig]:
    """Every key of the file to write: SGLang's own keys (its file's, else its tuning script's batch sizes and
    the experts count and one past it, where its default config switches) with SGLang's picks there, and the
    tuned batch sizes with their configs. A call of any size then reads what SGLang would have run, except
    near a tuned batch size."""
    picks = picks_at(list(moe_configs.BATCH_SIZES))
    if picks and picks[0].source == "file":
        keys = sorted(moe_configs.read(Path(picks[0].path)))
    else:
        keys = sorted({*moe_configs.BATCH_SIZES, shape.experts, shape.experts + 1})
    table = {p.tokens: p.config for p in picks_at(keys)}
    table.update(chosen)
    return dict(sorted(table.items()))


def search_then_check(tuner: BucketTuner, options: TuneOptions, started: float, batch: Batch, run_dir: Path, echo,
                      unit: str):
    """The search under the options' rounds and budget, then one final evaluation (a new process, every check)
    of the chosen table against SGLang's pick, kept as run_dir/final.json: (evaluations, table, final)."""
    if tuner.cached:
        echo(f"cache: {tuner.cached} measurements of this GPU, Triton, kernel source and shape reused")
    evaluations = tuner.search(options.rounds, options.budget_s, started)
    evaluations += tuner.settle()
    table = tuner.chosen()
    echo(f"final evaluation: the chosen config at every {unit} against SGLang's pick, every check")
    final = batch([tuner.request(table, "final", final=True)])[0]
    echo(f"  final: {'ok' if final.ok else final.reason[:110]} ({wall_text(final)})")
    (run_dir / "final.json").write_text(final.model_dump_json(indent=1))
    return evaluations, table, final


def write_outputs(result: TuneResult, tuner: BucketTuner, run_dir: Path, bucket_name=str) -> None:
    """run_dir/tune.json, measurements.json (every config measured, per bucket) and the report tune.md."""
    (run_dir / "tune.json").write_text(result.model_dump_json(indent=1))
    (run_dir / "measurements.json").write_text(json.dumps(
        {bucket_name(b): {c: m.model_dump() for c, m in ms.items()} for b, ms in tuner.measured.items()}, indent=1))
    write_report(result, run_dir / "tune.md")


def tune_fused_moe(shape: MoeShape, buckets: list[int], run_dir: Path, options: TuneOptions, batch: Batch,
                   facts: Facts | None = None, picks_at=None, echo=print, progress=None,
                   screened: tuple[dict[int, list], dict] | None = None) -> TuneResult:
    """`screened`: (finalists, screens) per batch size of a screening done elsewhere (several shapes over a
    host's GPUs at once: moe_tiers): the strict tier takes those finalists and screens nothing itself."""
    started = time.perf_counter()
    facts = facts or facts_here()
    if picks_at is None:
        def picks_at(sizes):
            return moe_configs.sglang_picks(shape.experts, shape.inter, shape.hidden, shape.topk, sizes,
                                            shape.config_dtype)
    picks = {p.tokens: p for p in picks_at(buckets)}
    echo(f"fused_moe {shape.describe()} on {facts.gpu}, Triton {facts.triton}, SGLang {facts.sglang}: SGLang picks "
         f"{picks[buckets[0]].describe()}")
    seeds = {t: moe_configs.shipped_configs(shape.experts, shape.inter, t, dtype=shape.config_dtype) for t in buckets}
    setup = Setup(shape=shape, buckets=buckets, picks=picks, gpu=facts.gpu, triton=facts.triton,
                  source_hash=facts.source_hash, seeds=seeds, smem=facts.smem)
    run_dir.mkdir(parents=True, exist_ok=True)
    provider, proposer, screens = None, None, {}
    if options.source_knob:  # configs with the variant's knobs, through the same evaluator
        from astra_sglang.triton.moe.provider import KernelSourceProvider

        provider = KernelSourceProvider(options.source_knob)
    if screened is not None:
        chosen, screens = screened
        width = max((len(v) for v in chosen.values()), default=0)
        proposer, options = Finalists(chosen), replace(options, rounds=1, width=max(width, 1))
    elif options.screen:
        from astra_sglang.optimize.tuner.moe_two_tier import screen_moe

        screen_hash = facts.source_hash if provider is None else keyed_hash(facts.source_hash, provider)
        chosen, screens = screen_moe(shape, {t: p.config for t, p in picks.items()}, facts.gpu, facts.triton,
                                     screen_hash, facts.smem, replace(options.screen, knob=provider), run_dir,
                                     options.use_cache, echo, progress)
        proposer, options = Finalists(chosen), replace(options, rounds=1, width=options.screen.finalists)
    cache = TuneCache("fused_moe") if options.use_cache else None
    kw = dict(proposer=proposer, run_id=run_dir.name, echo=echo, width=options.width, timeout_s=options.timeout_s)
    tuner = knob_tuner(provider, setup, batch, cache, **kw) if provider else moe_tuner(setup, batch, cache, **kw)
    evaluations, table, final = search_then_check(tuner, options, started, batch, run_dir, echo, "batch size")
    described = {"experts": shape.experts, "inter": shape.inter, "hidden": shape.hidden, "topk": shape.topk,
                 "dtype": shape.dtype, **({"quant": shape.quant} if shape.quantized else {})}
    result = TuneResult(kernel=shape.spec, date=dt.date.today().isoformat(), gpu=facts.gpu, triton=facts.triton,
                        sglang=facts.sglang, source_hash=facts.source_hash, shape=described,
                        buckets=tuner.finish(final, table), evaluations=evaluations + 1, cached=tuner.cached,
                        seconds=time.perf_counter() - started, final_ok=final.ok, final_reason=final.reason,
                        command=options.command, screen=[s.stats for s in screens.values()])
    for b in result.buckets:
        if b.tokens in screens:
            s = screens[b.tokens]
            best = s.ranked()[:1]
            b.screened = sum(r.stage != "unscreened" for r in s.results)
            b.screen_best, b.screen_us = (best[0].config, best[0].us) if best else (None, None)
            b.screen_pick_us = s.pick_us(b.pick)
    tuned = {b.tokens: tuner.op.from_code(b.chosen) for b in result.buckets if b.verdict == "tuned"}
    if provider and not any(not v.split.trivial for v in tuned.values()):
        tuned, provider = {t: v.config for t, v in tuned.items()}, None  # plain configs won: a config patch
    if tuned and options.patches_dir and provider:
        result.config_file = write_patch(options.patches_dir, result, shape, file_table(shape, tuned, picks_at),
                                         provider, run_dir.name)
    elif tuned and options.patches_dir:
        from astra_sglang.triton.moe.patch import write_config_patch

        folder = write_config_patch(options.patches_dir, result, file_table(shape, tuned, picks_at), facts.gpu,
                                    run_dir.name)
        result.config_file = str(folder / "configs" / moe_configs.version_dir(facts.triton) /
                                 moe_configs.file_name(shape.experts, shape.inter, facts.gpu, shape.config_dtype))
    elif not tuned:
        result.notes.append("SGLang's own pick is the best measured at every batch size: no file written")
    untuned = sorted(set(file_table(shape, {}, picks_at)) - set(buckets))
    if untuned:
        result.notes.append(f"batch-size keys left at SGLang's pick (not tuned): {', '.join(map(str, untuned))}")
    write_outputs(result, tuner, run_dir)
    return result
