"""`astra-sglang tune decode_attention|extend_attention`: the attention shape and buckets from the command
line, then the run (attn_run)."""
from __future__ import annotations

from pathlib import Path

import click

from astra_sglang.errors import AstraError
from astra_sglang.triton.attention.space import AttnShape
from astra_sglang.triton.attention.targets import TARGETS

# Every decode batch size at a short and a long kv length: one config serves both (BucketTuner.chosen).
DEFAULT_BUCKETS = {"decode_attention": "1x512,1x4096,8x512,8x4096,32x512,32x4096,64x512,64x4096",
                   "extend_attention": "512x0,2048x0,4096x0,1024x4096"}
DEFAULT_LENGTHS = {"decode_attention": "512,4096", "extend_attention": "0"}
PROFILE_KERNELS = {"decode_attention": "_fwd_grouped_kernel_stage1", "extend_attention": "_fwd_kernel"}


def attention_shape(model: str | None, shape_text: str | None, tp: int = 1, dtype: str | None = None) -> AttnShape:
    """From a model of extract/models.toml or HEADSxKV_HEADSxHEAD_DIM; heads split over tensor parallelism."""
    if bool(model) == bool(shape_text):
        raise AstraError("give the attention shape one way: --model (a name in extract/models.toml, e.g. llama-3-8b) "
                         "or --shape HEADSxKV_HEADSxHEAD_DIM")
    if model:
        from astra_sglang.specs.registry import models

        found = {m.name: m for m in models()}
        if model not in found:
            raise AstraError(f"unknown model {model!r} for attention; known: {', '.join(sorted(found))}")
        heads, kv_heads, head_dim = found[model].heads, found[model].kv_heads, found[model].head_dim
    else:
        try:
            heads, kv_heads, head_dim = (int(x) for x in shape_text.lower().split("x"))
        except ValueError:
            raise AstraError(f"bad --shape {shape_text!r}: q heads x kv heads x head dim, e.g. 32x8x128") from None
    if min(heads, kv_heads, head_dim) < 1:
        raise AstraError(f"bad --shape {shape_text!r}: q heads, kv heads and head dim are at least 1")
    if heads % tp or kv_heads % tp:
        raise AstraError(f"{heads} q heads / {kv_heads} kv heads do not split over tensor-parallel size {tp}")
    if heads % kv_heads:
        raise AstraError(f"{heads} q heads are not a multiple of {kv_heads} kv heads")
    return AttnShape(heads // tp, kv_heads // tp, head_dim, dtype or "bfloat16")


def parse_buckets(text: str) -> list[tuple[int, int]]:
    out = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        try:
            a, b = (int(x) for x in item.lower().split("x"))
        except ValueError:
            raise AstraError(f"bad bucket {item!r}: two sizes joined by 'x', e.g. 64x4096") from None
        if a < 1 or b < 0:
            raise AstraError(f"bad bucket {item!r}: the first size is at least 1, the second at least 0")
        out.append((a, b))
    if not out:
        raise AstraError(f"no bucket in {text!r}")
    return list(dict.fromkeys(out))


def parse_lengths(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise AstraError(f"bad --lengths {text!r}: sizes joined by ',', e.g. 1024,4096") from None
    if not values or min(values) < 0:
        raise AstraError(f"bad --lengths {text!r}: sizes of at least 0")
    return list(dict.fromkeys(values))


def tune_attention_cmd(kernel, model, tp, shape_text, dtype, buckets, lengths, profile_json, run_dir: Path, options,
                       batch) -> None:
    from astra_sglang.optimize.tuner.attention_run import facts_here, tune_attention
    from astra_sglang.optimize.tuner.report import print_result

    shape = attention_shape(model, shape_text, tp, dtype)
    if profile_json:
        from astra_sglang.profile.buckets import profile_buckets

        seconds = parse_lengths(lengths or DEFAULT_LENGTHS[kernel])
        found = profile_buckets(profile_json, keys=None, kernel=PROFILE_KERNELS[kernel])
        click.echo(f"profile: {PROFILE_KERNELS[kernel]} ran at step sizes " +
                   ", ".join(f"{b} ({calls} launches)" for b, calls in found))
        chosen = [(a, b) for a, _ in found for b in seconds]
    else:
        chosen = parse_buckets(buckets or DEFAULT_BUCKETS[kernel])
    from astra_sglang.specs.registry import check_shape, get_spec

    for a, b in chosen:  # the op's own rules (head dims it has a kernel for...), before the GPU is asked for
        check_shape(get_spec(kernel), (a, b, shape.heads, shape.kv_heads, shape.head_dim))
    facts = facts_here(kernel)
    click.echo(f"buckets ({' x '.join(TARGETS[kernel].bucket_dims)}): " + ", ".join(f"{a}x{b}" for a, b in chosen))
    result = tune_attention(kernel, shape, chosen, run_dir, options, batch, facts=facts, echo=click.echo)
    print_result(result)
    if result.patch_dir:
        click.echo(f"launch patch: {result.patch_dir}")
    click.echo(f"results: {run_dir / 'tune.md'}")
