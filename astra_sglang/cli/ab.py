"""`astra-sglang ab`: the click command; serving/ab.py runs it."""
from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console

from astra_sglang.cli.patch import PATCHES_OPTION, _errors
from astra_sglang.optimize.preflight import check_gpus
from astra_sglang.paths import writable_folder
from astra_sglang.serving.ab import run_ab
from astra_sglang.serving.designs import DESIGNS
from astra_sglang.serving.model import check_model
from astra_sglang.serving.server import DATASETS
from astra_sglang.serving.window import MIN_WINDOW_S


@click.command("ab", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--model-path", required=True, help="Model folder (config.json + tokenizer; no weights with dummy).")
@click.option("--load-format", default=None, help="Passed to the server, e.g. dummy (random weights).")
@click.option("--design", type=click.Choice(DESIGNS), default=None,
              help="crossover: two GPUs, A and B restarted together each period, swapped between GPUs; restarts "
                   "(default): one GPU, one server at a time in the order A B B A ...; paired: both up at once on "
                   "one GPU, one start each. restarts and paired claim nothing unless --aa names a passing A/A of "
                   "the same design.")
@click.option("--runs", type=click.IntRange(1, 50), default=None,
              help="crossover: periods (default 8); restarts: starts per arm (default 3, at least 3); paired: "
                   "rounds (default 8).")
@click.option("--rounds", type=click.IntRange(0, 20), default=2, show_default=True,
              help="crossover / restarts: timed rounds per start, after one untimed warm-up round of the same client "
                   "settings (0: parity only).")
@click.option("--gpus", default=None, help="GPU indices: two for crossover (0,1), one for the others.")
@PATCHES_OPTION
@click.option("--port", type=click.IntRange(1024, 65534), default=30000, show_default=True,
              help="A's port; B listens on the next one.")
@click.option("--num-prompts", type=click.IntRange(1), default=512, show_default=True)
@click.option("--input-len", type=click.IntRange(1), default=1024, show_default=True)
@click.option("--output-len", type=click.IntRange(1), default=256, show_default=True)
@click.option("--concurrency", type=click.IntRange(1), default=64, show_default=True)
@click.option("--warmup-requests", type=click.IntRange(0), default=1, show_default=True,
              help="Untimed requests the benchmark sends before each round (the prefix cache is flushed after them).")
@click.option("--dataset", type=click.Choice(DATASETS), default="random-ids", show_default=True,
              help="shared-prefix: prompts behind shared system prompts (cached-prefix prefills; with the "
                   "flashinfer backend this reaches merge_state).")
@click.option("--prefix-len", type=click.IntRange(1), default=2048, show_default=True,
              help="shared-prefix: system prompt tokens (input-len is each question's length).")
@click.option("--groups", type=click.IntRange(1), default=16, show_default=True,
              help="shared-prefix: number of distinct system prompts.")
@click.option("--paired", is_flag=True, help="The same as --design paired.")
@click.option("--warmup", type=click.IntRange(0, 5), default=1, show_default=True,
              help="paired: discarded rounds per server after both are up, each a full round of the timed rounds' "
                   "client settings.")
@click.option("--control", is_flag=True,
              help="An A/A control: B unpatched and started as A is. Its report applies the A/A rule (8 rounds, "
                   "typical change within 2%, an interval that holds 0).")
@click.option("--aa", "aa_dir", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="The folder of an A/A run: the parity reference (its own logprob differences) where it served "
                   "the same model, else A across its starts; with --design restarts or paired, an A/A of that "
                   "design that passed licenses its claims.")
@click.option("--min-window", type=click.FloatRange(min=0), default=MIN_WINDOW_S, show_default=True,
              help="Seconds: a timed round whose benchmark window is shorter is flagged in the report and fails the "
                   "A/A rule (its ramp-up and tail dominate it; 0: no check).")
@click.option("--stop-after", type=click.FloatRange(min=0), default=None,
              help="crossover / restarts: start no period that would end past this many seconds; the same command "
                   "with the same --out continues the run.")
@click.option("--no-stagger", is_flag=True,
              help="crossover: start the first period's servers at once too (by default they start one after the "
                   "other in a call's first period: a fresh machine's first start fills shared JIT cache folders).")
@click.option("--target-width", type=click.FloatRange(min=0, min_open=True),
              help="paired: stop once the throughput interval is at most this many % wide (after 5 rounds).")
@click.option("--seed", type=int, default=1, show_default=True, help="Prompt seed: the same prompts in every round.")
@click.option("--b-first", is_flag=True, help="paired: start the patched server first.")
@click.option("--health-timeout", type=click.IntRange(10), default=900, show_default=True, help="Seconds per start.")
@click.option("--bench-timeout", type=click.IntRange(10), default=900, show_default=True)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Output folder (default: ./astra-ab/<timestamp>); an existing run's folder continues it.")
@click.argument("server_args", nargs=-1, type=click.UNPROCESSED)
@_errors
def ab(model_path, load_format, design, runs, rounds, gpus, patches, port, num_prompts, input_len, output_len,
       concurrency, warmup_requests, dataset, prefix_len, groups, paired, warmup, control, aa_dir, min_window,
       stop_after, no_stagger, target_width, seed, b_first, health_timeout, bench_timeout, out, server_args):
    """Serving A/B: unpatched (A) vs patched (B) SGLang servers in one of three designs.

    Every start gets one untimed warm-up round of the timed rounds' own client settings, then --rounds timed
    rounds of SGLang's serving benchmark with the client pinned (same prompts, fixed lengths, warm-up requests,
    prefix cache flushed); then each server answers fixed prompts with its top logprobs, and B's are judged
    against A's. The interval's unit is the period (crossover) or the start (restarts): start-to-start variance
    is inside it. A round whose timed window is under --min-window seconds is flagged. Writes OUT/ab.jsonl,
    OUT/ab.md, OUT/summary.json after every period.

    \b
    Examples:
      astra-sglang ab --model-path M --design crossover --gpus 0,1 --control --runs 8 --out aa
      astra-sglang ab --model-path M --design crossover --gpus 0,1 --runs 8 --aa aa --out ab
      astra-sglang ab --model-path M --design restarts --runs 3 --rounds 3 -- --attention-backend triton
      astra-sglang ab --model-path M --design crossover --gpus 0,1 --runs 1 --rounds 0 --patches P --aa aa
      astra-sglang ab --model-path M --load-format dummy --paired --runs 12 \\
        -- --mem-fraction-static 0.4 --max-total-tokens 400000 --sleep-on-idle
    """
    design = "paired" if paired else (design or "restarts")
    if design != "paired" and (target_width or b_first):
        raise click.UsageError("--target-width and --b-first go with --design paired")
    check_model(model_path, load_format, lambda msg: click.echo(f"note: {msg}", err=True))  # before builds and SGLang
    if out:
        writable_folder(out, "--out")
    check_gpus(gpus, none_ok=False)
    if design != "paired":  # the design's GPU count, before the build
        from astra_sglang.serving.designs import schedule

        schedule(design, runs or (8 if design == "crossover" else 3), rounds,  # run_ab's defaults
                 [g.strip() for g in (gpus or "").split(",") if g.strip()])
    run_ab(model_path=model_path, load_format=load_format, design=design, runs=runs, rounds=rounds, gpus=gpus,
           patches=patches, port=port, num_prompts=num_prompts, input_len=input_len, output_len=output_len,
           concurrency=concurrency, warmup_requests=warmup_requests, dataset=dataset, prefix_len=prefix_len,
           groups=groups, warmup=warmup, control=control, aa_dir=aa_dir, stop_after=stop_after, no_stagger=no_stagger,
           target_width=target_width, seed=seed, b_first=b_first, health_timeout=health_timeout,
           bench_timeout=bench_timeout, out=out, server_args=server_args, min_window=min_window,
           console=Console(highlight=False), err_console=Console(stderr=True, highlight=False))
