"""`astra-sglang ab`: unpatched (A) vs patched (B) SGLang servers under SGLang's serving benchmark, in one of
the designs of serving/designs.py, with intervals over the design's unit and a logprob parity check.

crossover and restarts run in serving/runner.py (resumable from --out), paired in serving/paired.py.
"""
from __future__ import annotations

import importlib.util
import json
import time
from pathlib import Path

import click

from astra_sglang.errors import AstraError
from astra_sglang.patching.cli import PATCHES_OPTION, _errors, patched_server
from astra_sglang.serving.designs import DESIGNS
from astra_sglang.serving.server import DATASETS, server_command

RESERVED = ("--host", "--port", "--model-path", "--model", "--load-format")


def sglang_available() -> bool:
    return importlib.util.find_spec("sglang") is not None


def check_args(extra) -> None:
    if not sglang_available():
        raise AstraError("sglang is not importable in this Python; run `ab` in the serving environment")
    clash = [a for a in extra if a.split("=")[0] in RESERVED]
    if clash:
        raise AstraError(f"pass {', '.join(clash)} as ab's own options, not after --")


def model_vocab(model_path: str) -> int:
    """The model's vocabulary size (config.json), for the parity prompts' token ids; 32000 where unreadable."""
    try:
        return int(json.loads((Path(model_path) / "config.json").read_text())["vocab_size"])
    except (OSError, ValueError, KeyError, TypeError):
        return 32000


@click.command("ab", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--model-path", required=True, help="Model folder (config.json + tokenizer; no weights with dummy).")
@click.option("--load-format", default=None, help="Passed to the server, e.g. dummy (random weights).")
@click.option("--design", type=click.Choice(DESIGNS), default=None,
              help="crossover: two GPUs, A and B restarted together each period, swapped between GPUs; restarts "
                   "(default): one GPU, one server at a time in the order A B B A ...; paired: both up at once on "
                   "one GPU, one start each (no claim unless --aa names a passing A/A of that design).")
@click.option("--runs", type=click.IntRange(1, 50), default=None,
              help="crossover: periods (default 8); restarts: starts per arm (default 3, at least 3); paired: "
                   "rounds (default 8).")
@click.option("--rounds", type=click.IntRange(0, 20), default=2, show_default=True,
              help="crossover / restarts: timed rounds per start, after one untimed warm-up round (0: parity only).")
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
              help="paired: discarded rounds of a short benchmark per server after both are up.")
@click.option("--control", is_flag=True,
              help="An A/A control: B unpatched and started as A is. Its report applies the A/A rule (8 rounds, "
                   "typical change within 2%, an interval that holds 0).")
@click.option("--aa", "aa_dir", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="The folder of an A/A run: the parity reference (its own logprob differences); with --design "
                   "paired, an A/A of that design that passed licenses its claims.")
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
       concurrency, warmup_requests, dataset, prefix_len, groups, paired, warmup, control, aa_dir, stop_after,
       no_stagger, target_width, seed, b_first, health_timeout, bench_timeout, out, server_args):
    """Serving A/B: unpatched (A) vs patched (B) SGLang servers in one of three designs.

    Every start gets one untimed warm-up round, then --rounds timed rounds of SGLang's serving benchmark with
    the client pinned (same prompts, fixed lengths, warm-up requests, prefix cache flushed); then each server
    answers fixed prompts with its top logprobs, and B's are judged against A's. The interval's unit is the
    period (crossover) or the start (restarts): start-to-start variance is inside it. Writes OUT/ab.jsonl,
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
    check_args(server_args)
    if design == "paired":  # its warnings come before the build
        from astra_sglang.serving.paired import check_paired

        check_paired(server_args)
    gpu_list = [g.strip() for g in gpus.split(",") if g.strip()] if gpus else []
    out = (out or Path("astra-ab") / time.strftime("%Y%m%d-%H%M%S")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    if not control:
        argv = server_command(model_path, port, load_format, server_args)
        _, _, summary = patched_server(patches, stats_dir=out / "stats" / "check", server_args=argv[3:],
                                       warn=lambda msg: click.echo(f"warning: {msg}", err=True))  # validate + build
        click.echo(summary)
    opts = dict(model_path=model_path, port=port, num_prompts=num_prompts, input_len=input_len,
                output_len=output_len, concurrency=concurrency, dataset=dataset, prefix_len=prefix_len, groups=groups,
                health_timeout=health_timeout, repeats=1, seed=seed, control=control, bench_timeout=bench_timeout,
                warmup_requests=warmup_requests, extra=list(server_args))
    if design == "paired":
        from astra_sglang.serving.paired import paired_ab

        (out / "ab.jsonl").unlink(missing_ok=True)
        report = paired_ab(patches, model_path, load_format, server_args, opts, out, runs or 8, warmup, b_first,
                           target_width, aa_dir)
        return click.echo(f"wrote {out / 'ab.jsonl'} and {report}")
    from astra_sglang.serving import designs, report as report_mod, runner
    from astra_sglang.serving.client import ClientSettings

    plan = runner.RunPlan(design=design, client=ClientSettings.from_opts(opts), model_path=model_path,
                          load_format=load_format, server_args=list(server_args), control=control,
                          patches=str(patches.resolve()) if patches else None, gpus=gpu_list, port=port,
                          vocab=model_vocab(model_path),
                          periods=designs.schedule(design, runs or (8 if design == "crossover" else 3), rounds,
                                                   gpu_list))
    plan = runner.load_or_write_plan(out, plan)
    ran = runner.run(plan, out, runner.default_launch(plan, out),
                     on_period=lambda: report_mod.write_design_report(out, aa_dir), stop_after=stop_after,
                     health_timeout=health_timeout, stagger_first=not no_stagger)
    path = report_mod.write_design_report(out, aa_dir)
    click.echo(f"{ran} period(s) run; wrote {out / runner.ROWS} and {path}")
