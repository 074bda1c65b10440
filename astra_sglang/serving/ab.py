"""Serving A/B (`astra-sglang ab`): alternate unpatched (A) and patched (B) SGLang servers, benchmark each, probe
greedy parity.

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
from astra_sglang.patching.server_env import patched_server
from astra_sglang.patching.stats import ENV_STATS_INTERVAL
from astra_sglang.serving import server
from astra_sglang.serving.server import STATS_INTERVAL_S, server_command, strip_patch_env

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


def run_ab(model_path, load_format, runs, patches, port, num_prompts, input_len, output_len, concurrency, dataset,
       prefix_len, groups, warmup, repeats, paired, control, target_width, seed, b_first, health_timeout,
       bench_timeout, out, server_args):
    """The A/B behind `astra-sglang ab` (cli/ab.py documents its options)."""
    from astra_sglang.serving.report import write_report

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
