"""`astra-sglang ab --paired`: the unpatched (A) and patched (B) servers up at once on one GPU, benchmarked in
counterbalanced rounds (AB, BA, AB, ...), one server at a time.

Each server starts once and every round measures B within seconds of A; alternating the order cancels drift
over the run. But every round shares the two starts' offsets, and two identical servers on one H100 differed by
14% in throughput in both round orders (2026-11-25): its interval leaves that out, and the report makes no claim
with it unless an A/A of this design passed (`--aa`). The crossover and restarts designs (serving/runner.py)
put the start variance inside the interval. The servers, benchmarks and probes are serving/server.py's.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from astra_sglang.patching.server_env import patched_server
from astra_sglang.patching.stats import ENV_STATS_INTERVAL
from astra_sglang.serving import design_stats, license, noise, report, server, settings, window
from astra_sglang.serving.client import ClientSettings


@dataclass
class PairedArm:
    """One of the two servers, alive for the whole paired A/B."""
    name: str
    port: int
    argv: list[str]
    env: dict
    stats_dir: Path | None = None
    proc: subprocess.Popen | None = None
    ready_s: float = float("nan")
    kv_tokens: int | None = None
    info: dict | None = None
    """Its /server_info once healthy ({} where it did not answer)."""


@dataclass
class PairedRow:
    """One benchmark of one arm in one round; to_json() is ab.jsonl's row format plus paired, order, kv_tokens."""
    arm: str
    run: int
    order: str
    ready_s: float
    metrics: dict
    outputs: list | None = None
    stats_dir: str | None = None
    kv_tokens: int | None = None
    started_first: bool = True
    gpu: dict | None = None
    """nvidia-smi's state of the GPU before and after the benchmark (noise.gpu_state)."""
    control: bool = False
    """An A/A control: B is unpatched too."""

    def to_json(self) -> dict:
        row = {"arm": self.arm, "run": self.run, "repeat": 1, "ready_s": self.ready_s, "metrics": self.metrics,
               "outputs": self.outputs, "paired": True, "order": self.order, "kv_tokens": self.kv_tokens,
               "started_first": self.started_first, "gpu": self.gpu, "control": self.control}
        return {**row, "stats_dir": self.stats_dir} if self.stats_dir else row


def round_order(run: int) -> str:
    """A first in odd rounds, B first in even ones: a drift over the run then favours neither arm."""
    return "AB" if run % 2 else "BA"


def _flag_value(args, flag: str) -> str | None:
    for i, arg in enumerate(args):
        if arg == flag:
            return args[i + 1] if i + 1 < len(args) else ""
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None


def server_warnings(server_args) -> list[str]:
    """What the server args lack for two servers on one GPU (warnings: the user may know better)."""
    out = []
    if _flag_value(server_args, "--mem-fraction-static") is None:
        out.append("--paired runs both servers on one GPU: pass e.g. `-- --mem-fraction-static 0.4` so both fit")
    if _flag_value(server_args, "--max-total-tokens") is None:
        out.append("--paired: B starts after A and sizes its KV pool from the memory A left, so the pools differ; "
                   "pass `--max-total-tokens N` (within both) to make them equal (the report shows both sizes)")
    return out


def check_paired(server_args, err_console: Console | None = None) -> None:
    """Warnings about the server args of --paired on `err_console` (default stderr; the user may know better)."""
    err_console = err_console or Console(stderr=True, highlight=False)
    for msg in server_warnings(server_args):
        err_console.out(f"warning: {msg}")


def start_arm(arm: PairedArm, out: Path, health_timeout: float, console: Console | None = None) -> None:
    console = console or Console(highlight=False)
    log = out / f"server-{arm.name}-paired.log"
    console.out(f"[{arm.name}] starting server on port {arm.port}: {' '.join(arm.argv)}")
    arm.proc = server.start_server(arm.argv, arm.env, log)
    arm.ready_s = server.wait_healthy(arm.proc, arm.port, log, health_timeout)
    info = server.server_info(arm.port)
    # What each server resolved from the memory it found: the second one to start finds less.
    (out / f"server-info-{arm.name}.json").write_text(json.dumps(info, indent=1, default=str))
    arm.kv_tokens, arm.info = server.kv_tokens(info), info
    console.out(f"[{arm.name}] healthy after {arm.ready_s:.0f} s; KV pool {arm.kv_tokens} tokens")


def stop_arms(arms: list[PairedArm]) -> None:
    """Stop every started server, each even when stopping another raised."""
    if not arms:
        return
    try:
        if arms[0].proc is not None:
            server.stop_server(arms[0].proc)
    finally:
        stop_arms(arms[1:])


def run_rounds(a: PairedArm, b: PairedArm, opts: dict, out: Path, runs: int, warmup: int, on_round,
               b_first: bool = False, enough=lambda rows: False, console: Console | None = None) -> list[dict]:
    """Start A, then B (B, then A with `b_first`; see below); `warmup` discarded rounds; up to `runs` recorded
    rounds, calling on_round(new rows, all rows) after each and stopping early once enough(all rows); both
    servers are stopped however this ends."""
    arms, rows, nan = {"A": a, "B": b}, [], float("nan")
    console = console or Console(highlight=False)
    try:
        # One after the other: SGLang sizes its KV pool from the memory free at its own profiling, so a server
        # profiling while the other allocates would find almost nothing left and fail to start. The second
        # server sizes more than its pool from what it finds (server-info-*.json): `b_first` swaps the roles.
        for arm in ((b, a) if b_first else (a, b)):
            start_arm(arm, out, opts["health_timeout"], console)
        have_both = bool(a.info) and bool(b.info)
        diffs = settings.differences(a.info or {}, b.info or {}) if have_both else []
        settings.write(out, diffs, have_both)
        console.out(settings.summary(diffs, have_both))
        for w in range(1, warmup + 1):  # full rounds: JIT compiles, prefill shapes, CUDA graphs and pools met here
            for arm in (a, b):
                server.run_benchmark(arm.port, out / f"bench-warmup-{arm.name}-{w}.jsonl", opts)
        for run in range(1, runs + 1):
            order, new = round_order(run), []
            for name in order:
                arm = arms[name]
                before = noise.gpu_state()
                metrics = server.run_benchmark(arm.port, out / f"bench-{name}-{run}.jsonl", opts)
                new.append(PairedRow(name, run, order, arm.ready_s, metrics, kv_tokens=arm.kv_tokens,
                                     stats_dir=str(arm.stats_dir) if arm.stats_dir else None,
                                     started_first=(name == "B") == b_first,
                                     gpu={"before": before, "after": noise.gpu_state()},
                                     control=bool(opts.get("control"))))
                timed = window.describe(window.windows([{"metrics": metrics}])[0],
                                        opts.get("min_window_s", window.MIN_WINDOW_S))
                console.out(f"[{name}{run} {order}] output {metrics['output_throughput']:.1f} tok/s, TTFT "
                           f"{metrics.get('mean_ttft_ms', nan):.1f} ms, ITL {metrics.get('mean_itl_ms', nan):.2f} ms; "
                           f"{timed}")
            if run == 1:  # greedy parity once per server, after its first recorded benchmark
                for row in new:
                    row.outputs = server.parity_probe(arms[row.arm].port, "--skip-tokenizer-init" in opts["extra"])
            rows.extend(row.to_json() for row in new)
            on_round(rows[-len(new):], rows)
            if enough(rows):
                console.out(f"stopping after round {run}: the throughput interval is narrow enough")
                break
        if ENV_STATS_INTERVAL in b.env:  # one more stats write, so the counters include the last round
            time.sleep(float(b.env[ENV_STATS_INTERVAL]) + 1.0)
    finally:
        stop_arms([b, a])
    return rows


def _exit_on_sigterm(signum, frame):
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def sigterm_runs_finally():
    """`timeout` ends us with SIGTERM, which skips `finally`; the servers run in their own sessions, so they
    would outlive us and keep the GPU and both ports. Turned into SystemExit here, the finally stops them."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def paired_ab(patches, model_path: str, load_format: str | None, server_args, opts: dict, out: Path, runs: int,
              warmup: int, b_first: bool = False, target_width: float | None = None,
              aa_dir: Path | None = None, console: Console | None = None,
              err_console: Console | None = None, min_window_s: float = window.MIN_WINDOW_S) -> Path:
    """The paired A/B of `ab --paired`: A on opts['port'], B on the port after it (unpatched too with
    opts['control']); writes OUT/ab.jsonl and OUT/ab.md after every round, and stops early once the throughput
    interval is at most target_width % wide. Returns the report's path. Progress goes to `console`, the
    no-claim note to `err_console` (defaults: stdout, stderr)."""
    console = console or Console(highlight=False)
    err_console = err_console or Console(stderr=True, highlight=False)
    port = opts["port"]
    argv_a = server.server_command(model_path, port, load_format, server_args)
    a = PairedArm("A", port, argv_a, server.strip_patch_env(dict(os.environ)))
    argv_b = server.server_command(model_path, port + 1, load_format, server_args)
    if opts.get("control"):  # A/A: B started exactly as A is
        stats, b = None, PairedArm("B", port + 1, argv_b, server.strip_patch_env(dict(os.environ)))
    else:
        stats = out / "stats" / "B-paired"
        env_b, command_b, _ = patched_server(patches, stats_dir=stats, no_build=True, server_args=argv_b[3:])
        b = PairedArm("B", port + 1, command_b, {**env_b, ENV_STATS_INTERVAL: str(server.STATS_INTERVAL_S)}, stats)
    stats_dirs = [stats] if stats else []
    rows_file = out / "ab.jsonl"
    (out / report.CLIENT).write_text(ClientSettings.from_opts(opts).model_dump_json(indent=1))  # for the report

    def on_round(new: list[dict], rows: list[dict]) -> None:  # a time limit keeps the rounds before it
        with open(rows_file, "a") as fh:
            fh.writelines(json.dumps(row) + "\n" for row in new)
        report.write_report(out, rows, stats_dirs, licensed, min_window_s=min_window_s)

    licensed = license.licensed_by(aa_dir, "paired", min_window_s)
    if not licensed:
        err_console.out("note: the paired design makes no claim without a passing paired A/A (--aa): its rounds "
                        "share one start per arm")
    enough = (lambda rows: noise.width_reached(rows, target_width)) if target_width else (lambda rows: False)
    with sigterm_runs_finally():
        rows = run_rounds(a, b, opts, out, runs, warmup, on_round, b_first, enough, console)
    # again: the stats now include the last round
    return report.write_report(out, rows, stats_dirs, licensed, min_window_s=min_window_s)
