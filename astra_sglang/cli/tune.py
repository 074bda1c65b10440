"""`astra-sglang tune`: tune the config of an SGLang Triton kernel that reads per-GPU config files (fused MoE)."""
from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path

import click

from astra_sglang.errors import AstraError


def _shape(model, tp, shape_text, dtype):
    from astra_sglang.specs.registry import check_shape, get_spec
    from astra_sglang.triton.moe.shapes import MoeShape, from_config

    if bool(model) == bool(shape_text):
        raise AstraError("give the expert shape one way: --model (a config.json or its folder) or --shape EXNxHxK")
    if model:
        shape = from_config(model, tp)
    else:
        try:
            experts, inter, hidden, topk = (int(x) for x in shape_text.lower().split("x"))
        except ValueError:
            raise AstraError(f"bad --shape {shape_text!r}: experts x inter (N) x hidden x topk, e.g. 128x768x2048x8")\
                from None
        shape = MoeShape(experts, inter, hidden, topk)
    if dtype:
        shape = MoeShape(shape.experts, shape.inter, shape.hidden, shape.topk, dtype)
    check_shape(get_spec("fused_moe"), shape.shape(1))  # the op's own rules, before the GPU is asked for
    return shape


def _lanes(gpus: str | None):
    """(the strict tier's batch: a pool over the GPUs where there are several, the GPU ids to screen on, the pool
    to close or None)."""
    from astra_sglang.harness.isolate import evaluate_many
    from astra_sglang.optimize.pool.devices import visible_gpus

    here = visible_gpus()
    lanes = visible_gpus(gpus) if gpus is not None else here
    unknown = [g for g in lanes if g not in here]
    if unknown or not lanes:
        raise AstraError(f"--gpus {gpus!r}: no GPU {', '.join(unknown) or '(none given)'} here (visible: "
                         f"{', '.join(here) or 'none'})")
    if len(lanes) == 1:
        return evaluate_many, lanes, None
    from astra_sglang.optimize.pool.pool import LocalPool

    pool = LocalPool(lanes)
    return pool.map, lanes, pool


@click.command("tune")
@click.argument("kernel")
@click.option("--model", help="fused_moe: the model's config.json (or its folder): the expert shape (E, N per rank, "
              "hidden, top-k). Attention: a model of extract/models.toml (e.g. llama-3-8b): its heads and head dim.")
@click.option("--tp", type=click.IntRange(min=1), default=1, show_default=True,
              help="Tensor-parallel size the server runs (divides N).")
@click.option("--shape", "shape_text", help="The expert shape instead of --model: EXPERTSxNxHIDDENxTOPK.")
@click.option("--dtype", type=click.Choice(["bfloat16", "float16"]), help="Default: the model's torch_dtype.")
@click.option("--buckets", help="fused_moe: batch sizes, e.g. 1,64,4096 (default: SGLang's 18 config keys, 1-4096). "
              "decode_attention: BATCHxKV_LEN, e.g. 1x1024,64x4096; extend_attention: EXTENDxPREFIX, e.g. 2048x0.")
@click.option("--lengths", help="Attention with --profile: the second bucket dim crossed with the profile's sizes "
              "(kv lengths for decode, default 1024,4096; prefix lengths for extend, default 0).")
@click.option("--profile", "profile_json", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="An astra-sglang profile.json of the server: tune the batch sizes its steps ran the kernel at.")
@click.option("--rounds", default=2, show_default=True, help="Search rounds (1: first guesses only).")
@click.option("--width", default=4, show_default=True, help="Configs tried per batch size per round (= evaluations).")
@click.option("--budget", type=float, help="Seconds for the whole run: no round starts that would overrun it.")
@click.option("--patches-dir", type=click.Path(file_okay=False, path_type=Path),
              help="Write the tuned configs and their manifest here (<dir>/<kernel>/; default: HOME/patches, "
              "which `launch` loads over the shipped set).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), help="Run folder (default runs/tune-TIME).")
@click.option("--no-cache", is_flag=True, help="Evaluate every config again (the cache is still written).")
@click.option("--timeout", default=900.0, show_default=True, help="Hard limit per isolated evaluation, seconds.")
@click.option("--gpus", help="GPU ids to use, e.g. 0,1 (default: every visible GPU): a screening worker on each, "
              "and the isolated evaluations spread over them.")
@click.option("--screen/--no-screen", default=True, show_default=True,
              help="fused_moe: the screening tier first (each batch size's whole ordered space, fast), its finalists "
              "to the isolated evaluator; --no-screen: the search of --rounds x --width evaluations alone.")
@click.option("--screen-budget", type=float, help="Seconds for the screening tier over all batch sizes (default: "
              "every config of each batch size's ordered space).")
@click.option("--finalists", default=3, show_default=True,
              help="Configs per batch size the screening tier hands to the isolated evaluator (one evaluation each).")
@click.option("--space", "space_name", type=click.Choice(["sglang", "wide"]), default="sglang", show_default=True,
              help="sglang: SGLang's tuning grid (1,920 configs); wide: with BLOCK_SIZE_K 32, GROUP_SIZE_M 8 and "
              "maxnreg 128 (6,400).")
@click.option("--ray", "ray_address", help="Screen on a Ray cluster (an address, or auto): one actor per GPU node.")
@click.option("--source-knob", default="", metavar="VARIANT",
              help="fused_moe: also search a source variant's knob beside the configs (screened too): splitk (SGLang's kernel with "
              "split-K, made from the installed source) or an agent's registered variant (agent-HASH); writes a "
              "source patch.")
def tune(kernel, model, tp, shape_text, dtype, buckets, lengths, profile_json, rounds, width, budget, patches_dir, out,
         no_cache, timeout, gpus, screen, screen_budget, finalists, space_name, ray_address, source_knob):
    """Tune KERNEL's Triton config per batch size against the config SGLang picks itself.

    For decode_attention / extend_attention: SGLang's Triton attention launchers hard-code their block sizes
    and launch options (decode) or pick them by GPU and head dim (extend); this searches them per bucket
    against SGLang's own pick and writes a launch patch that `launch` installs (into HOME/patches, or --patches-dir).

    For fused_moe: SGLang launches its Triton fused_moe_kernel with block sizes, warps and stages from a file per
    GPU and expert shape, or a default config where it ships none. This searches those configs per batch size
    through the isolated evaluator (each config checked like any kernel and timed against SGLang's own pick in
    the same process), confirms the winners in a final evaluation and writes them (HOME/patches, or --patches-dir) in
    SGLang's file format (SGLang's own picks elsewhere) as a patch that `launch` and `profile --patched` load.
    Results are cached by GPU, Triton version, kernel source and shape. Writes OUT/tune.json and OUT/tune.md.
    With --source-knob, the configs' split-K values are searched with them, and the winners are written as a
    source patch: SGLang's kernel with split-K, regenerated from the installed source where it is served.

    \b
    Examples:
      astra-sglang tune fused_moe --model ./qwen3-moe --buckets 1,16,64,256 --patches-dir my-patches
      astra-sglang tune fused_moe --model ./qwen3-moe --profile astra-profile/base/profile.json --budget 300
      astra-sglang tune fused_moe --shape 8x14336x4096x2 --rounds 3 --width 6
      astra-sglang tune fused_moe --shape 8x7168x4096x2 --buckets 1,4,16 --source-knob splitk
      astra-sglang tune decode_attention --model llama-3-8b --buckets 1x1024,16x2048,64x4096
      astra-sglang tune extend_attention --model llama-3-8b --buckets 512x0,2048x0,1024x4096
      astra-sglang launch --patches my-patches -- --model-path ./qwen3-moe
    """
    from astra_sglang.harness.isolate import evaluate_many
    from astra_sglang.optimize.tuner.moe_run import TuneOptions, tune_fused_moe
    from astra_sglang.optimize.tuner.report import print_result
    from astra_sglang.profile.buckets import profile_buckets
    from astra_sglang.triton.moe.shapes import parse_buckets

    if rounds < 1 or width < 1 or finalists < 1:
        raise AstraError("--rounds, --width and --finalists must be at least 1")
    if buckets and profile_json:
        raise AstraError("give --buckets or --profile, not both")
    run_dir = Path(out or Path("runs") / f"tune-{time.strftime('%Y%m%d-%H%M%S')}")
    if patches_dir is None:  # never into the installed package
        from astra_sglang.paths import user_patches_dir

        patches_dir = user_patches_dir()
    options = TuneOptions(rounds=rounds, width=width, budget_s=budget, timeout_s=timeout, use_cache=not no_cache,
                          patches_dir=patches_dir, command=shlex.join(["astra-sglang", *sys.argv[1:]]),
                          source_knob=source_knob)
    from astra_sglang.triton.attention.space import KERNELS

    if kernel in KERNELS:
        from astra_sglang.cli.tune_attention import tune_attention_cmd

        return tune_attention_cmd(kernel, model, tp, shape_text, dtype, buckets, lengths, profile_json, run_dir,
                                  options, evaluate_many)
    if kernel != "fused_moe":
        raise AstraError(f"tune works on SGLang's Triton kernels fused_moe, decode_attention, extend_attention, not {kernel!r}; "
                         "CUDA ops: astra-sglang optimize")
    shape = _shape(model, tp, shape_text, dtype)
    if source_knob:  # the variant is made (or found) before any evaluation: a source it does not fit stops here
        from astra_sglang.triton.moe.sources import by_name

        by_name(source_knob)
    from astra_sglang.optimize.tuner.moe_run import facts_here

    facts = facts_here()  # no GPU: said here, before anything is compiled or started
    batch, lanes, pool = _lanes(gpus)
    if screen:
        from astra_sglang.optimize.tuner.moe_two_tier import ScreenOptions

        options.screen = ScreenOptions(gpus=lanes, budget_s=screen_budget, finalists=finalists, space=space_name,
                                       ray=ray_address)
    if profile_json:
        found = profile_buckets(profile_json)
        click.echo("profile: fused_moe_kernel ran at batch sizes " +
                   ", ".join(f"{b} ({calls} launches)" for b, calls in found))
        sizes = sorted(b for b, _ in found)
    else:
        from astra_sglang.triton.moe.configs import BATCH_SIZES

        sizes = parse_buckets(buckets) if buckets else list(BATCH_SIZES)
    from astra_sglang.optimize.tuner.screen_progress import ScreenProgress

    try:
        with ScreenProgress() as progress:
            result = tune_fused_moe(shape, sizes, run_dir, options, batch=batch, facts=facts, echo=click.echo,
                                    progress=progress if screen else None)
    finally:
        if pool is not None:
            pool.close()
    print_result(result)
    if result.config_file:
        click.echo(f"config file: {result.config_file}")
    click.echo(f"results: {run_dir / 'tune.md'}")
