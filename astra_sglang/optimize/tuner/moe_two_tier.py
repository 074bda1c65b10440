"""Fused MoE's screening tier ahead of the strict evaluator: each batch size's ordered space (order.py) screened
on every GPU given (a worker per GPU, Triton compiles ahead on the CPU cores; or Ray actors past one host), the
results written to the run folder (screen.jsonl: every config; screen.json: each batch size's figures) and the
finalists handed to the bucket tuner (bucket.Finalists).

A finalist is a plain config (MoeConfig code), or with a source knob (`ScreenOptions.knob`: split-K, an agent's
variant) a Variant: the knob's values worth measuring on SGLang's pick and on the shipped configs are screened
right after them (`<config>+<variant>:SPLIT_K_UP=..,SPLIT_K_DOWN=..`, through the variant's screening hook,
triton/moe/source_op.py), and its finalists reach the strict tier through the same evaluator op. Any other
kernel variant's configs (`ScreenOptions.variants`, moe_screen.py) are screened and reported only.
"""
from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from astra_sglang.errors import AstraError
from astra_sglang.optimize.tuner.cache import ScreenCache, ScreenKey
from astra_sglang.optimize.tuner.moe_order import PRUNE, gpu_model, ordered
from astra_sglang.optimize.tuner.screen_worker_handle import WorkerLost, WorkerSettings
from astra_sglang.optimize.tuner.two_tier import BucketScreen, finalists, screen_buckets
from astra_sglang.paths import cache_dir
from astra_sglang.triton.moe.knobs import Variant
from astra_sglang.triton.moe.provider import KernelSourceProvider
from astra_sglang.triton.moe.shapes import MoeShape
from astra_sglang.triton.moe.source_op import screen_hook
from astra_sglang.triton.moe.space import MoeConfig
from astra_sglang.triton.screen_records import Screened

LAUNCH = "astra_sglang.optimize.tuner.moe_screen:MoeScreenLaunch"


@dataclass
class ScreenOptions:
    gpus: list[str]
    budget_s: float | None = None
    """Seconds for the screening of all batch sizes (None: every config of every order)."""
    finalists: int = 3
    space: str = "sglang"
    prune: float | None = PRUNE
    ray: str | None = None
    """A Ray address: one actor per GPU node (its own pool) instead of this host's GPUs."""
    compile_workers: int | None = None
    config_timeout_s: float = 60.0
    deadline: float | None = None
    """Absolute time (time.time()) past which no config starts."""
    variants: dict[str, str] = field(default_factory=dict)
    """Kernel variant name -> "module:function" (moe_screen.py)."""
    knob: KernelSourceProvider | None = None
    """A source knob's variant, screened and handed on with its knob values (see above)."""
    target: str = LAUNCH
    launch_options: dict = field(default_factory=dict)
    """Extra options of the launch (the simulated launch's landscape, say)."""


def triton_cache() -> Path:
    return cache_dir() / "triton"


@contextmanager
def open_screener(shape: MoeShape, options: ScreenOptions):
    launch = {"experts": shape.experts, "inter": shape.inter, "hidden": shape.hidden, "topk": shape.topk,
              "dtype": shape.dtype, **({"variants": options.variants} if options.variants else {})}
    if options.target != LAUNCH:
        launch = dict(options.launch_options)
    settings = WorkerSettings(target=options.target, options=launch)
    try:
        if options.ray:
            from astra_sglang.optimize.tuner.screen_ray import RayScreener

            screener = RayScreener(options.ray, settings, triton_cache(), compile_workers=options.compile_workers,
                                   config_timeout_s=options.config_timeout_s)
        else:
            from astra_sglang.optimize.tuner.screen_pool import ScreenPool

            screener = ScreenPool(settings, list(options.gpus), triton_cache(), options.compile_workers,
                                  options.config_timeout_s)
    except WorkerLost as lost:
        raise AstraError(f"a screening worker did not start: {lost.reason.splitlines()[0]}") from None
    try:
        yield screener
    finally:
        screener.close()


def screen_moe(shape: MoeShape, picks: dict[int, MoeConfig], gpu: str, triton: str, source_hash: str, smem: int,
               options: ScreenOptions, run_dir: Path, use_cache: bool = True, echo=print, progress=None
               ) -> tuple[dict[int, list[MoeConfig]], dict[int, BucketScreen]]:
    """(finalists per batch size, each batch size's screening)."""
    model = gpu_model(gpu, smem)
    orders = {t: ordered(shape, t, pick, model, options.space, options.prune) for t, pick in picks.items()}
    codes = {t: o.codes for t, o in orders.items()}
    knob = options.knob
    if knob:
        options = replace(options, variants={**options.variants, knob.name: screen_hook(knob.name)})
        codes = {t: with_knob(o.configs, o.codes, o.seeds, knob, t, shape) for t, o in orders.items()}
    for t, o in orders.items():
        echo(f"batch size {t}: {len(o.codes)} configs to screen (SGLang's pick, {o.seeds} shipped elsewhere, the "
             f"rest by the cost model), {len(o.pruned)} dropped")

    def key(tokens: int) -> ScreenKey:
        return ScreenKey(gpu=gpu, triton=triton, source_hash=source_hash, shape=shape.shape(tokens), dtype=shape.dtype)

    with open_screener(shape, options) as screener:
        screens = screen_buckets(
            screener, codes, {t: p.code() for t, p in picks.items()},
            budget_s=options.budget_s, deadline=options.deadline, cache=ScreenCache("fused_moe") if use_cache else None,
            key=key, pruned={t: o.pruned for t, o in orders.items()},
            on_bucket=progress.on_bucket if progress else None, on_result=progress.on_result if progress else None)
    write_screens(run_dir, screens)
    return finalists_by_bucket(screens, {t: p.code() for t, p in picks.items()}, options.finalists, knob, echo), screens


def tile(code: str) -> tuple[int, int, int]:
    """A screened config's tile (BLOCK_SIZE_M/N/K): the family its finalists are drawn one per."""
    config = MoeConfig.from_code(code.partition("+")[0])  # a knob's variant: the config it varies
    return config.block_m, config.block_n, config.block_k


def finalists_by_bucket(screens: dict[int, BucketScreen], picks: dict[int, str], count: int,
                        knob: KernelSourceProvider | None = None, echo=print,
                        knob_screens: dict[int, BucketScreen] | None = None, knob_count: int = 0
                        ) -> dict[int, list[MoeConfig | Variant]]:
    """Each batch size's finalists for the strict tier: up to `count` that screened as fast as SGLang's pick, the
    fastest of each tile first (`finalists`), then, from a knob's own screening of its variants (`knob_screens`),
    its `knob_count` fastest whatever their time (the knob's figure against the best plain config is the strict
    tier's to give)."""
    out: dict[int, list[MoeConfig | Variant]] = {}
    for t, s in screens.items():
        codes = finalists(s, picks[t], count, family=tile)
        extra = [r.config for r in (knob_screens or {})[t].ranked()[:knob_count]] if t in (knob_screens or {}) else []
        codes += [c for c in extra if c not in codes]
        out[t] = [Variant.from_screen_code(c) if knob else MoeConfig.from_code(c) for c in codes
                  if "+" not in c or (knob and c.partition("+")[2].startswith(knob.name + ":"))]
        pick_us, ranked = s.pick_us(picks[t]), s.ranked()
        best = f"best {ranked[0].config} {ranked[0].us:.1f} us" if ranked else "nothing timed"
        pick = f"SGLang's pick {pick_us:.1f} us" if pick_us else "SGLang's pick not timed"
        echo(f"batch size {t}: screened {s.stats.screened} ({s.reused} from the cache) in {s.stats.wall_s:.0f} s; "
             f"{best}; {pick}; finalists: {', '.join(codes) or 'none as fast as the pick'}")
    return out


def knob_variants(screened: list[Screened], pick: MoeConfig, knob: KernelSourceProvider, tokens: int,
                  shape: MoeShape, top: int) -> list[str]:
    """The knob's variants worth measuring (screening codes) of SGLang's pick and of the `top` fastest plain
    configs screened at this batch size: where a source knob could beat the best configs."""
    ranked = sorted((r for r in screened if r.ok and "+" not in r.config), key=lambda r: r.us)
    bases = [pick] + [MoeConfig.from_code(r.config) for r in ranked[:top]]
    return list(dict.fromkeys(v.screen_code(knob.name) for c in bases for v in knob.extend(c, tokens, shape)
                              if not v.split.trivial))


def with_knob(configs: list[MoeConfig], codes: list[str], seeds: int, knob: KernelSourceProvider, tokens: int,
              shape: MoeShape) -> list[str]:
    """The order's codes with the knob's values worth measuring on SGLang's pick and the seeds (the first
    1 + `seeds`) right after them: where the config tuner's own search would start (moe_knob_tune)."""
    head = 1 + seeds
    extra = [v.screen_code(knob.name) for c in configs[:head] for v in knob.extend(c, tokens, shape)
             if not v.split.trivial]
    return codes[:head] + list(dict.fromkeys(extra)) + codes[head:]


def write_screens(run_dir: Path, screens: dict[int, BucketScreen]) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    with (run_dir / "screen.jsonl").open("w") as fh:
        for s in screens.values():
            for r in s.results:
                fh.write(r.model_dump_json() + "\n")
            for code, why in s.pruned.items():
                fh.write(json.dumps({"config": code, "bucket": s.stats.bucket, "stage": "pruned", "reason": why})
                         + "\n")
    (run_dir / "screen.json").write_text(json.dumps(
        [{**s.stats.model_dump(), "per_second": s.stats.per_second, "hit_rate": s.stats.hit_rate, "reused": s.reused,
          "pruned": len(s.pruned)} for s in screens.values()], indent=1))
