"""`astra-sglang ab`: the click command; serving/ab.py runs it."""
from __future__ import annotations

from pathlib import Path

import click

from astra_sglang.cli.patch import PATCHES_OPTION, _errors
from astra_sglang.serving.ab import run_ab
from astra_sglang.serving.server import DATASETS


@click.command("ab", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--model-path", required=True, help="Model folder (config.json + tokenizer; no weights with dummy).")
@click.option("--load-format", default=None, help="Passed to the server, e.g. dummy (random weights).")
@click.option("--runs", type=click.IntRange(1, 50), default=3, show_default=True,
              help="Runs per arm (A B A B ...); with --paired: rounds (AB, BA, AB, ...).")
@PATCHES_OPTION
@click.option("--port", type=click.IntRange(1024, 65535), default=30000, show_default=True,
              help="Server port; with --paired, B listens on the next one.")
@click.option("--num-prompts", type=click.IntRange(1), default=512, show_default=True)
@click.option("--input-len", type=click.IntRange(1), default=1024, show_default=True)
@click.option("--output-len", type=click.IntRange(1), default=256, show_default=True)
@click.option("--concurrency", type=click.IntRange(1), default=64, show_default=True)
@click.option("--dataset", type=click.Choice(DATASETS), default="random-ids", show_default=True,
              help="shared-prefix: prompts behind shared system prompts (cached-prefix prefills; with the "
                   "flashinfer backend this reaches merge_state).")
@click.option("--prefix-len", type=click.IntRange(1), default=2048, show_default=True,
              help="shared-prefix: system prompt tokens (input-len is each question's length).")
@click.option("--groups", type=click.IntRange(1), default=16, show_default=True,
              help="shared-prefix: number of distinct system prompts.")
@click.option("--warmup", type=click.IntRange(0, 5), default=1, show_default=True,
              help="Discarded starts of the unpatched server before the A/B (with a short benchmark): the first "
                   "start on a machine JIT-compiles flashinfer's kernels, which would otherwise land in A's first run. "
                   "With --paired: discarded rounds of one short benchmark per server.")
@click.option("--repeats", type=click.IntRange(1, 20), default=1, show_default=True,
              help="Benchmarks per server start, each its own sample: server starts dominate an A/B's time, and "
                   "repeats separate the noise of one start from the noise between starts.")
@click.option("--paired", is_flag=True,
              help="Both servers up at once on one GPU (A on --port, B on --port + 1; pass a --mem-fraction-static "
                   "that fits two, e.g. 0.4, and --sleep-on-idle so the idle scheduler does not busy-poll a CPU core), "
                   "benchmarked one at a time in rounds AB, BA, AB, ...; the report adds per-round paired changes "
                   "with a bootstrap interval.")
@click.option("--control", is_flag=True,
              help="--paired: an A/A control, B unpatched and started as A is: the interval it reaches is the noise "
                   "floor a real A/B must get under.")
@click.option("--target-width", type=click.FloatRange(min=0, min_open=True),
              help="--paired: stop once the interval of the median throughput change is at most this many % wide "
                   "(after 5 rounds); --runs is then the most rounds.")
@click.option("--seed", type=int, default=1, show_default=True, help="Prompt seed: the same prompts in every run.")
@click.option("--b-first", is_flag=True,
              help="--paired: start the patched server first (the second server sizes its pools and prefill "
                   "settings from the memory the first left: run both orders to tell that from the patch).")
@click.option("--health-timeout", type=click.IntRange(10), default=900, show_default=True, help="Seconds per start.")
@click.option("--bench-timeout", type=click.IntRange(10), default=900, show_default=True)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Output folder (default: ./astra-ab/<timestamp>).")
@click.argument("server_args", nargs=-1, type=click.UNPROCESSED)
@_errors
def ab(model_path, load_format, runs, patches, port, num_prompts, input_len, output_len, concurrency, dataset,
       prefix_len, groups, warmup, repeats, paired, control, target_width, seed, b_first, health_timeout,
       bench_timeout, out, server_args):
    """Serving A/B: unpatched (A) vs patched (B) SGLang servers, alternated A B A B.

    Each run starts a server on 127.0.0.1, waits for /health, runs `sglang.benchmark.serving` (--dataset),
    probes greedy outputs on a few fixed prompts, and stops it. --warmup unpatched starts come first and are
    discarded. Writes OUT/ab.jsonl and OUT/ab.md (medians, spreads, deltas, noise, greedy parity, per-op
    engagement of the patched server); the report is rewritten after every run, so a run cut short by a
    time limit still leaves the runs before it. --paired starts each server once, keeps both up and compares
    them round by round instead (B measured seconds after or before A; see --paired).

    \b
    Examples:
      astra-sglang ab --model-path ./llama-8b --load-format dummy --runs 3
      astra-sglang ab --model-path M --load-format dummy --out ab-run -- --attention-backend triton
      astra-sglang ab --model-path M --load-format dummy --dataset shared-prefix --input-len 256 \\
        -- --attention-backend flashinfer
      astra-sglang ab --model-path M --load-format dummy --paired --runs 12 \\
        -- --mem-fraction-static 0.4 --max-total-tokens 400000 --sleep-on-idle
      astra-sglang ab --model-path M --load-format dummy --paired --control --runs 30 --target-width 1 \\
        -- --mem-fraction-static 0.4 --max-total-tokens 400000 --sleep-on-idle
    """
    if (control or target_width) and not paired:
        raise click.UsageError("--control and --target-width go with --paired")
    return run_ab(model_path, load_format, runs, patches, port, num_prompts, input_len, output_len, concurrency,
                  dataset, prefix_len, groups, warmup, repeats, paired, control, target_width, seed, b_first,
                  health_timeout, bench_timeout, out, server_args)
