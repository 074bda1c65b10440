"""`astra-sglang ab`: alternate unpatched (A) and patched (B) SGLang servers, benchmark each, probe greedy parity.

The servers, benchmarks and probes are serving/server.py's; `--paired` runs serving/paired.py instead.
"""
from __future__ import annotations

import importlib.util
import json
import os
import time
from pathlib import Path

import click

from astra_sglang.errors import AstraError
from astra_sglang.cli.patch import PATCHES_OPTION, _errors, patched_server
from astra_sglang.patching.stats import ENV_STATS_INTERVAL
from astra_sglang.serving import server
from astra_sglang.serving.server import DATASETS, STATS_INTERVAL_S, server_command, strip_patch_env

RESERVED = ("--host", "--port", "--model-path", "--model", "--load-format")


def run_arm(arm: str, run: int, argv: list[str], env: dict, opts: dict, out: Path) -> list[dict]:
    """One server start: `repeats` benchmarks back to back (one row each), then the greedy-parity probe."""
    log = out / f"server-{arm}-{run}.log"
    click.echo(f"[{arm}{run}] starting server: {' '.join(argv)}")
    proc = server.start_server(argv, env, log)
    rows, nan, repeats = [], float("nan"), opts.get("repeats", 1)
    try:
        ready = server.wait_healthy(proc, opts["port"], log, opts["health_timeout"])
        click.echo(f"[{arm}{run}] healthy after {ready:.0f} s; benchmarking")
        for rep in range(1, repeats + 1):
            suffix = "" if repeats == 1 else f"-{rep}"
            metrics = server.run_benchmark(opts["port"], out / f"bench-{arm}-{run}{suffix}.jsonl", opts)
            rows.append({"arm": arm, "run": run, "repeat": rep, "ready_s": ready, "metrics": metrics, "outputs": None})
            click.echo(f"[{arm}{run}{suffix}] output {metrics['output_throughput']:.1f} tok/s, TTFT "
                       f"{metrics.get('mean_ttft_ms', nan):.1f} ms, ITL {metrics.get('mean_itl_ms', nan):.2f} ms")
        rows[0]["outputs"] = server.parity_probe(opts["port"], "--skip-tokenizer-init" in opts["extra"])
        if ENV_STATS_INTERVAL in env:  # one more stats write, so the counters include the benchmark
            time.sleep(float(env[ENV_STATS_INTERVAL]) + 1.0)
    finally:
        server.stop_server(proc)
    return rows


def sglang_available() -> bool:
    return importlib.util.find_spec("sglang") is not None


def check_args(extra) -> None:
    if not sglang_available():
        raise AstraError("sglang is not importable in this Python; run `ab` in the serving environment")
    clash = [a for a in extra if a.split("=")[0] in RESERVED]
    if clash:
        raise AstraError(f"pass {', '.join(clash)} as ab's own options, not after --")


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
    from astra_sglang.serving.report import write_report

    if (control or target_width) and not paired:
        raise click.UsageError("--control and --target-width go with --paired")
    check_args(server_args)
    if paired:  # its usage errors and warnings come before the build
        from astra_sglang.serving.paired import check_paired, paired_ab

        check_paired(repeats, port, server_args)
    out = (out or Path("astra-ab") / time.strftime("%Y%m%d-%H%M%S")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    argv = server_command(model_path, port, load_format, server_args)
    if not control:
        _, _, summary = patched_server(patches, stats_dir=out / "stats" / "check", server_args=argv[3:],
                                       warn=lambda msg: click.echo(f"warning: {msg}", err=True))  # validate + build
        click.echo(summary)
    opts = dict(model_path=model_path, port=port, num_prompts=num_prompts, input_len=input_len,
                output_len=output_len, concurrency=concurrency, dataset=dataset, prefix_len=prefix_len, groups=groups,
                health_timeout=health_timeout, repeats=repeats, seed=seed, control=control,
                bench_timeout=bench_timeout, extra=list(server_args))
    rows_file = out / "ab.jsonl"
    rows_file.unlink(missing_ok=True)
    if paired:
        report = paired_ab(patches, model_path, load_format, server_args, opts, out, runs, warmup, b_first,
                           target_width)
        return click.echo(f"wrote {rows_file} and {report}")
    rows, stats_dirs = [], []
    for run in range(1, warmup + 1):  # JIT caches filled here; nothing recorded (logs: server-warmup-*.log)
        run_arm("warmup", run, argv, strip_patch_env(dict(os.environ)),
                {**opts, "num_prompts": min(num_prompts, 2 * concurrency), "repeats": 1}, out)
    for run in range(1, runs + 1):
        for arm in ("A", "B"):
            if arm == "A":
                env, command = strip_patch_env(dict(os.environ)), argv
                stats = None
            else:
                stats = out / "stats" / f"B-{run}"
                env, command, _ = patched_server(patches, stats_dir=stats, no_build=True, server_args=argv[3:])
                env = {**env, ENV_STATS_INTERVAL: str(STATS_INTERVAL_S)}
                stats_dirs.append(stats)
            arm_rows = [{**row, "stats_dir": str(stats)} if stats else row
                        for row in run_arm(arm, run, command, env, opts, out)]
            rows.extend(arm_rows)
            with open(rows_file, "a") as fh:
                fh.writelines(json.dumps(row) + "\n" for row in arm_rows)
            report = write_report(out, rows, stats_dirs)
    click.echo(f"wrote {rows_file} and {report}")
