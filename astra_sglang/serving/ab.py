"""`astra-sglang ab`: alternate unpatched (A) and patched (B) SGLang servers, benchmark each, probe greedy parity.

Commands are built by pure functions (`server_command`, `bench_command`, `probe_payload`) so they can be
checked without a GPU. Every server listens on 127.0.0.1 only and is stopped by killing its process group.
"""
from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import click

from astra_sglang.errors import AstraError
from astra_sglang.patching.cli import PATCHES_OPTION, _errors, patched_server
from astra_sglang.patching.stats import ENV_STATS_INTERVAL

HOST = "127.0.0.1"
PROBE_PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time, in a small village,",
                 "List three prime numbers:"]
PROBE_TOKENS = 32
RESERVED = ("--host", "--port", "--model-path", "--model", "--load-format")
METRICS = ("request_throughput", "output_throughput", "input_throughput", "total_throughput", "completed",
           "duration", "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms",
           "p99_tpot_ms", "mean_itl_ms", "median_itl_ms", "p99_itl_ms", "mean_e2e_latency_ms",
           "median_e2e_latency_ms", "p99_e2e_latency_ms")


# The patched arm writes its stats every STATS_INTERVAL_S seconds and run_arm waits one more write before the
# stop: SGLang's processes die on SIGTERM without their atexit write, and with the default 10 s period a
# benchmark of a few seconds was missing from the counts (session 6: the stats ended before it started).
STATS_INTERVAL_S = 2.0


def server_command(model_path: str, port: int, load_format: str | None = None, extra=(),
                   python: str = sys.executable) -> list[str]:
    """argv of a plain (unpatched) SGLang server on loopback."""
    fmt = ["--load-format", load_format] if load_format else []
    return [python, "-m", "sglang.launch_server", "--model-path", model_path, *fmt, "--host", HOST,
            "--port", str(port), *extra]


DATASETS = ("random-ids", "shared-prefix")
"""random-ids: independent prompts (no download). shared-prefix: groups of prompts behind one shared system
prompt, so prefills extend a cached prefix (SGLang's generated-shared-prefix dataset); the flashinfer
attention backend merges the two partial states there (flashinfer.cascade.merge_state)."""


def bench_command(model_path: str, port: int, output_file: str | Path, num_prompts: int = 512,
                  input_len: int = 1024, output_len: int = 256, concurrency: int = 64,
                  python: str = sys.executable, dataset: str = "random-ids", prefix_len: int = 2048,
                  groups: int = 16) -> list[str]:
    """argv of SGLang's serving benchmark on `dataset` (no download either way), appending JSONL to output_file.

    shared-prefix: `groups` system prompts of `prefix_len` tokens, num_prompts / groups questions of
    `input_len` tokens behind each."""
    common = [python, "-m", "sglang.benchmark.serving", "--backend", "sglang", "--host", HOST, "--port", str(port),
              "--model", model_path, "--tokenizer", model_path, "--num-prompts", str(num_prompts),
              "--max-concurrency", str(concurrency), "--disable-tqdm", "--output-file", str(output_file)]
    if dataset == "shared-prefix":
        per_group = max(1, -(-num_prompts // groups))
        return [*common, "--dataset-name", "generated-shared-prefix", "--gsp-num-groups", str(groups),
                "--gsp-prompts-per-group", str(per_group), "--gsp-system-prompt-len", str(prefix_len),
                "--gsp-question-len", str(input_len), "--gsp-output-len", str(output_len)]
    return [*common, "--dataset-name", "random-ids", "--random-input-len", str(input_len),
            "--random-output-len", str(output_len), "--random-range-ratio", "1.0"]


def probe_payload(index: int, skip_tokenizer: bool = False) -> dict:
    """POST /generate body of parity prompt `index`: greedy, fixed length (token ids when there is no tokenizer)."""
    params = {"temperature": 0, "max_new_tokens": PROBE_TOKENS}
    if skip_tokenizer:
        return {"input_ids": [(17 * index + 31 * k) % 1000 + 100 for k in range(16)], "sampling_params": params}
    return {"text": PROBE_PROMPTS[index], "sampling_params": params}


def parse_bench_line(line: str) -> dict:
    """The metrics of one JSONL line of the serving benchmark (known keys that are present, as floats)."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise AstraError(f"benchmark output is not JSON: {line[:200]!r}") from exc
    metrics = {k: float(record[k]) for k in METRICS if isinstance(record.get(k), (int, float))}
    if "output_throughput" not in metrics:
        raise AstraError(f"benchmark output has no output_throughput: {sorted(record)[:20]}")
    return metrics


def read_bench(path: Path) -> dict:
    lines = [ln for ln in path.read_text().splitlines() if ln.strip()] if path.exists() else []
    if not lines:
        raise AstraError(f"the benchmark wrote nothing to {path}")
    return parse_bench_line(lines[-1])


def strip_patch_env(env: dict) -> dict:
    """The environment of the unpatched arm: no ASTRA_SGLANG_* settings (the plugin then does nothing)."""
    return {k: v for k, v in env.items() if not k.startswith("ASTRA_SGLANG_")}


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _http(port: int, path: str, body: dict | None = None, timeout: float = 5.0):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"http://{HOST}:{port}{path}", data=data,
                                 headers={"Content-Type": "application/json"} if data else {})
    with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - loopback only
        return json.loads(resp.read() or b"null") if body is not None else resp.status


def start_server(argv: list[str], env: dict, log: Path) -> subprocess.Popen:
    with open(log, "wb") as fh:
        return subprocess.Popen(argv, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)


def wait_healthy(proc: subprocess.Popen, port: int, log: Path, timeout_s: float) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        if proc.poll() is not None:
            raise AstraError(f"server exited with {proc.returncode} before becoming healthy; log tail:\n{_tail(log)}")
        try:
            if _http(port, "/health") == 200:
                return time.monotonic() - start
        except (urllib.error.URLError, OSError, ValueError):
            pass
        time.sleep(2)
    raise AstraError(f"server not healthy after {timeout_s:.0f} s; log tail:\n{_tail(log)}")


def stop_server(proc: subprocess.Popen, grace_s: float = 20.0) -> None:
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            time.sleep(1)  # let the group's children go and the port free up
            return
        except subprocess.TimeoutExpired:
            continue


def parity_probe(port: int, skip_tokenizer: bool) -> list:
    outputs = []
    for i in range(len(PROBE_PROMPTS)):
        reply = _http(port, "/generate", probe_payload(i, skip_tokenizer), timeout=120)
        reply = reply[0] if isinstance(reply, list) else reply
        outputs.append(reply.get("output_ids") or reply.get("text"))
    return outputs


def run_benchmark(port: int, bench_file: Path, opts: dict) -> dict:
    bench_file.unlink(missing_ok=True)
    bench = bench_command(opts["model_path"], port, bench_file, opts["num_prompts"], opts["input_len"],
                          opts["output_len"], opts["concurrency"], dataset=opts["dataset"],
                          prefix_len=opts["prefix_len"], groups=opts["groups"])
    done = subprocess.run(bench, env=strip_patch_env(dict(os.environ)), capture_output=True, text=True,
                          timeout=opts["bench_timeout"])
    if done.returncode != 0:
        raise AstraError(f"benchmark failed ({done.returncode}):\n{(done.stdout + done.stderr)[-3000:]}")
    return read_bench(bench_file)


def run_arm(arm: str, run: int, argv: list[str], env: dict, opts: dict, out: Path) -> list[dict]:
    """One server start: `repeats` benchmarks back to back (one row each), then the greedy-parity probe."""
    log = out / f"server-{arm}-{run}.log"
    click.echo(f"[{arm}{run}] starting server: {' '.join(argv)}")
    proc = start_server(argv, env, log)
    rows, nan, repeats = [], float("nan"), opts.get("repeats", 1)
    try:
        ready = wait_healthy(proc, opts["port"], log, opts["health_timeout"])
        click.echo(f"[{arm}{run}] healthy after {ready:.0f} s; benchmarking")
        for rep in range(1, repeats + 1):
            suffix = "" if repeats == 1 else f"-{rep}"
            metrics = run_benchmark(opts["port"], out / f"bench-{arm}-{run}{suffix}.jsonl", opts)
            rows.append({"arm": arm, "run": run, "repeat": rep, "ready_s": ready, "metrics": metrics, "outputs": None})
            click.echo(f"[{arm}{run}{suffix}] output {metrics['output_throughput']:.1f} tok/s, TTFT "
                       f"{metrics.get('mean_ttft_ms', nan):.1f} ms, ITL {metrics.get('mean_itl_ms', nan):.2f} ms")
        rows[0]["outputs"] = parity_probe(opts["port"], "--skip-tokenizer-init" in opts["extra"])
        if ENV_STATS_INTERVAL in env:  # one more stats write, so the counters include the benchmark
            time.sleep(float(env[ENV_STATS_INTERVAL]) + 1.0)
    finally:
        stop_server(proc)
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
       prefix_len, groups, warmup, repeats, paired, b_first, health_timeout, bench_timeout, out, server_args):
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
    """
    from astra_sglang.serving.report import write_report

    check_args(server_args)
    if paired:  # its usage errors and warnings come before the build
        from astra_sglang.serving.paired import check_paired, paired_ab

        check_paired(repeats, port, server_args)
    out = (out or Path("astra-ab") / time.strftime("%Y%m%d-%H%M%S")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    argv = server_command(model_path, port, load_format, server_args)
    _, _, summary = patched_server(patches, stats_dir=out / "stats" / "check", server_args=argv[3:],
                                   warn=lambda msg: click.echo(f"warning: {msg}", err=True))  # validate + build once
    click.echo(summary)
    opts = dict(model_path=model_path, port=port, num_prompts=num_prompts, input_len=input_len,
                output_len=output_len, concurrency=concurrency, dataset=dataset, prefix_len=prefix_len, groups=groups,
                health_timeout=health_timeout, repeats=repeats,
                bench_timeout=bench_timeout, extra=list(server_args))
    rows_file = out / "ab.jsonl"
    rows_file.unlink(missing_ok=True)
    if paired:
        report = paired_ab(patches, model_path, load_format, server_args, opts, out, runs, warmup, b_first)
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
