"""SGLang servers and SGLang's serving benchmark, as the A/B runs them (`ab` and `ab --paired`).

Commands are built by pure functions (`server_command`, `bench_command`, `probe_payload`) so they can be
checked without a GPU. Every server listens on 127.0.0.1 only and is stopped by killing its process group.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from astra_sglang.errors import AstraError

HOST = "127.0.0.1"
PROBE_PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time, in a small village,",
                 "List three prime numbers:"]
PROBE_TOKENS = 32
METRICS = ("request_throughput", "output_throughput", "input_throughput", "total_throughput", "completed",
           "duration", "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms",
           "p99_tpot_ms", "mean_itl_ms", "median_itl_ms", "p99_itl_ms", "mean_e2e_latency_ms",
           "median_e2e_latency_ms", "p99_e2e_latency_ms")


# The patched arm writes its stats every STATS_INTERVAL_S seconds and the A/B waits one more write before the
# stop: SGLang's processes die on SIGTERM without their atexit write, and with the default 10 s period the
# counts of a benchmark of a few seconds ended before it started.
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
                  groups: int = 16, seed: int = 1, warmup_requests: int | None = None,
                  flush_cache: bool = False) -> list[str]:
    """argv of SGLang's serving benchmark on `dataset` (no download either way), appending JSONL to output_file;
    the same `seed` gives both arms the same prompts in every round. `warmup_requests` (None: the benchmark's
    default, 1) untimed requests come first; `flush_cache` empties the server's prefix cache after them.

    shared-prefix: `groups` system prompts of `prefix_len` tokens, num_prompts / groups questions of
    `input_len` tokens behind each."""
    common = [python, "-m", "sglang.benchmark.serving", "--backend", "sglang", "--host", HOST, "--port", str(port),
              "--model", model_path, "--tokenizer", model_path, "--num-prompts", str(num_prompts),
              "--max-concurrency", str(concurrency), "--disable-tqdm", "--output-file", str(output_file),
              "--seed", str(seed)]
    if warmup_requests is not None:
        common += ["--warmup-requests", str(warmup_requests)]
    if flush_cache:
        common.append("--flush-cache")
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


def wait_healthy(proc: subprocess.Popen, port: int, log: Path, timeout_s: float, since: float | None = None) -> float:
    """Seconds from `since` (the server's launch, time.monotonic(); default now) until /health answers 200: servers
    started together and waited for one after the other each count from their own launch."""
    start = time.monotonic() if since is None else since
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


def server_info(port: int) -> dict:
    """The server's /server_info (its resolved settings: pool sizes, chunked prefill, graph sizes), or {}."""
    try:
        info = _http_get_json(port, "/server_info")
    except (urllib.error.URLError, OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


def _http_get_json(port: int, path: str, timeout: float = 10.0):
    with urllib.request.urlopen(f"http://{HOST}:{port}{path}", timeout=timeout) as resp:  # noqa: S310 - loopback
        return json.loads(resp.read())


def kv_tokens(info: dict) -> int | None:
    """The KV pool in tokens from a /server_info reply, or None when it does not say."""
    value = info.get("max_total_num_tokens")
    return int(value) if isinstance(value, (int, float)) else None


def post_generate(port: int, body: dict, timeout: float = 120.0):
    """POST /generate on the server at `port` (the decoded JSON reply)."""
    return _http(port, "/generate", body, timeout=timeout)


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
                          prefix_len=opts["prefix_len"], groups=opts["groups"], seed=opts.get("seed", 1),
                          warmup_requests=opts.get("warmup_requests"), flush_cache=opts.get("flush_cache", True))
    done = subprocess.run(bench, env=strip_patch_env(dict(os.environ)), capture_output=True, text=True,
                          timeout=opts["bench_timeout"])
    if done.returncode != 0:
        raise AstraError(f"benchmark failed ({done.returncode}):\n{(done.stdout + done.stderr)[-3000:]}")
    return read_bench(bench_file)
