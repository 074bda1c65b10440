"""One Triton attention tuning run end to end: SGLang's pick per bucket, the search, the final evaluation, the
results (tune.json, tune.md) and, where a config beat SGLang's, the launch patch."""
from __future__ import annotations

import datetime as dt
import time
from pathlib import Path

from astra_sglang.errors import AstraError
from astra_sglang.optimize.tuner.attention_tune import AttnSetup, Bucket, attn_tuner
from astra_sglang.optimize.tuner.bucket import Batch
from astra_sglang.optimize.tuner.cache import TuneCache
from astra_sglang.optimize.tuner.moe_run import Facts, TuneOptions, search_then_check, write_outputs
from astra_sglang.triton.attention.space import SMEM_BYTES, AttnShape, space
from astra_sglang.triton.attention.targets import sglang_pick, target
from astra_sglang.triton.moe import configs as moe_configs
from astra_sglang.triton.results import TuneResult


def facts_here(kernel: str) -> Facts:
    """This machine's GPU, Triton, SGLang and the installed attention kernel file's hash."""
    import torch

    from astra_sglang.extraction.sources import _version
    from astra_sglang.extraction.triton.discover import source_hash

    if not torch.cuda.is_available():
        raise AstraError("no CUDA device visible: tuning checks and times every config on the GPU")
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    root = moe_configs.package_dir()
    return Facts(gpu=torch.cuda.get_device_name(), smem=getattr(props, "shared_memory_per_block_optin", SMEM_BYTES),
                 triton=moe_configs.triton_version(), sglang=_version(root, "sglang"),
                 source_hash=source_hash([root / target(kernel).file]))


def tune_attention(kernel: str, shape: AttnShape, buckets: list[Bucket], run_dir: Path, options: TuneOptions,
                   batch: Batch, facts: Facts | None = None, capability=None, echo=print) -> TuneResult:
    started = time.perf_counter()
    facts = facts or facts_here(kernel)
    picks = {b: sglang_pick(kernel, shape, b, capability=capability) for b in buckets}
    _, filtered = space(kernel, shape, facts.smem)
    dims = " x ".join(target(kernel).bucket_dims)
    echo(f"{kernel} ({shape.describe()}) on {facts.gpu}, Triton {facts.triton}, SGLang {facts.sglang}: "
         f"{len(buckets)} buckets ({dims}); SGLang picks " +
         ", ".join(sorted({p.code() for p in picks.values()})) + f"; {len(filtered)} configs filtered out")
    setup = AttnSetup(kernel=kernel, shape=shape, buckets=buckets, picks=picks, gpu=facts.gpu, triton=facts.triton,
                      source_hash=facts.source_hash, smem=facts.smem)
    run_dir.mkdir(parents=True, exist_ok=True)
    tuner = attn_tuner(setup, batch, TuneCache(kernel) if options.use_cache else None, run_id=run_dir.name,
                      echo=echo, width=options.width, timeout_s=options.timeout_s)
    evaluations, table, final = search_then_check(tuner, options, started, batch, run_dir, echo, "bucket")
    result = TuneResult(kernel=kernel, date=dt.date.today().isoformat(), gpu=facts.gpu, triton=facts.triton,
                        sglang=facts.sglang, source_hash=facts.source_hash,
                        shape={"heads": shape.heads, "kv_heads": shape.kv_heads, "head_dim": shape.head_dim,
                               "dtype": shape.dtype, "splits": setup.splits},
                        buckets=tuner.finish(final, table), evaluations=evaluations + 1, cached=tuner.cached,
                        seconds=time.perf_counter() - started, final_ok=final.ok, final_reason=final.reason,
                        command=options.command, filtered=filtered)
    tuned = [b for b in result.buckets if b.verdict == "tuned"]
    if tuned and options.patches_dir:
        from astra_sglang.triton.attention.patch import write_launch_patch

        result.patch_dir = str(write_launch_patch(options.patches_dir, result, run_dir.name))
    best = [f"{'x'.join(map(str, b.bucket))}" for b in result.buckets if b.verdict == "sglang-best"]
    if best:
        result.notes.append(f"SGLang's own pick is already the best measured at {', '.join(best)}")
    write_outputs(result, tuner, run_dir, lambda b: "x".join(map(str, b)))
    return result
