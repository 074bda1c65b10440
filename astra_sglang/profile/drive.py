"""Drive a live SGLang server for a profile: load from SGLang's own serving benchmark, N scheduler steps
recorded by SGLang's own profiling endpoint (torch profiler traces), nothing of our own in the server.

The load runs in the background; once the benchmark's main run has begun (its log says so, after its
tokenizer, prompts and warm-up request), the server holds FILL of the load's concurrency in its batch and queue
(its /v1/loads; a server without that endpoint is given the time alone) and `settle_s` more seconds have passed,
POST /start_profile asks for `steps` scheduler steps
(CPU and GPU activity, input shapes, no Python stacks); the scheduler stops by itself and writes its
traces, which are waited for and kept in the output folder whatever happens after.
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
from dataclasses import dataclass
from pathlib import Path

from astra_sglang.errors import AstraError
from astra_sglang.profile.records import Workload
from astra_sglang.serving.server import bench_command

WORKLOADS = {
    # Decode-heavy: many short prompts generating long answers; prefill-heavy: long prompts, a few tokens out.
    "decode": Workload(name="decode", concurrency=64, input_len=256, output_len=512, num_prompts=512, settle_s=6.0),
    "prefill": Workload(name="prefill", concurrency=16, input_len=2048, output_len=8, num_prompts=512, settle_s=3.0),
}


@dataclass(frozen=True)
class Server:
    url: str
    model_path: str
    tp: int = 1

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1].split("/")[0])


def _request(url: str, body: dict | None = None, timeout: float = 30.0) -> tuple[int, bytes]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"} if data else {},
                                 method="POST" if data is not None else "GET")
    with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - a URL the user gave
        return resp.status, resp.read()


def attach(url: str) -> Server:
    """The server at `url`, its model and tensor-parallel size; a one-line error when there is none."""
    url = url.rstrip("/")
    try:
        _, body = _request(f"{url}/model_info", timeout=10)
    except urllib.error.HTTPError as exc:
        raise AstraError(f"{url} answered /model_info with HTTP {exc.code}: not an SGLang server?") from None
    except (urllib.error.URLError, OSError) as exc:
        raise AstraError(f"no SGLang server reachable at {url}: {getattr(exc, 'reason', exc)}") from None
    model = json.loads(body).get("model_path", "")
    tp = 1
    for path in ("/server_info", "/get_server_info"):
        try:
            info = json.loads(_request(f"{url}{path}", timeout=10)[1])
            tp = int(info.get("tp_size", 1) or 1)
            break
        except (urllib.error.URLError, OSError, ValueError):
            continue
    return Server(url=url, model_path=model, tp=tp)


def start_profile(server: Server, out_dir: Path, steps: int) -> None:
    body = {"output_dir": str(out_dir), "num_steps": steps, "activities": ["CPU", "GPU"], "record_shapes": True,
            "with_stack": False}
    try:
        _request(f"{server.url}/start_profile", body, timeout=60)
    except urllib.error.HTTPError as exc:
        if exc.code in (404, 405):
            raise AstraError(f"the server at {server.url} has no /start_profile endpoint (HTTP {exc.code}): "
                             "its SGLang cannot profile") from None
        detail = exc.read()[:200].decode(errors="replace")
        raise AstraError(f"/start_profile failed with HTTP {exc.code}: {detail}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise AstraError(f"the server at {server.url} stopped answering: {getattr(exc, 'reason', exc)}") from None


def wait_traces(out_dir: Path, timeout_s: float, alive=lambda: True) -> list[Path]:
    """Every trace file once none has grown for 3 s; an error when none appears in time."""
    deadline, sizes, stable = time.monotonic() + timeout_s, {}, 0.0
    while time.monotonic() < deadline:
        found = {p: p.stat().st_size for p in out_dir.glob("*.trace.json*")}
        if found and found == sizes:
            stable += 1.0
            if stable >= 3:
                return sorted(found)
        else:
            stable = 0.0
        sizes = found
        if not alive():
            raise AstraError(f"the server died while profiling; traces so far are kept in {out_dir}")
        time.sleep(1.0)
    raise AstraError(f"no complete trace appeared in {out_dir} within {timeout_s:.0f} s")


FILL = 0.9
"""Share of the load's concurrency the server must hold before the steps are recorded. Going by time alone, one
profile of the decode load recorded 19 steps of 1 request and the next 20 steps of 64, on the same server
command (H100, 2026-11-25): the in-place comparison of two such profiles compares different batches."""
MAIN_RUN = "Starting main benchmark"
"""What sglang.benchmark.serving prints once its warm-up request is done and the measured run starts."""


def requests_held(server: Server) -> int | None:
    """Requests running or waiting in the server (its /v1/loads, every data-parallel rank); None without it."""
    try:
        _, body = _request(f"{server.url}/v1/loads?include=core", timeout=5)
        return sum(int(r.get("num_running_reqs", 0)) + int(r.get("num_waiting_reqs", 0))
                   for r in json.loads(body).get("loads", []))
    except (urllib.error.URLError, OSError, ValueError, AttributeError, TypeError):
        return None


def wait_filled(server: Server, concurrency: int, timeout_s: float, alive=lambda: True, poll_s: float = 0.25,
                held=requests_held) -> int | None:
    """Until the server holds FILL of `concurrency` requests (or `timeout_s` passes); what it held last."""
    want, end, got = max(1, int(FILL * concurrency)), time.monotonic() + timeout_s, None
    while time.monotonic() < end and alive():
        got = held(server)
        if got is None or got >= want:
            return got
        time.sleep(poll_s)
    return got


def profile_load(server: Server, load: Workload, out_dir: Path, steps: int, start_timeout_s: float = 120.0,
                 timeout_s: float = 300.0, alive=lambda: True) -> list[Path]:
    """Run `load` against the server and record `steps` scheduler steps once it is warm; the traces."""
    out_dir.mkdir(parents=True, exist_ok=True)
    bench = bench_command(server.model_path, server.port, out_dir / "bench.jsonl", num_prompts=load.num_prompts,
                          input_len=load.input_len, output_len=load.output_len, concurrency=load.concurrency,
                          python=sys.executable)
    with open(out_dir / "bench.log", "wb") as log:
        proc = subprocess.Popen(bench, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})  # its progress lines, as printed
    try:
        begun, end = None, time.monotonic() + start_timeout_s
        while begun is None or time.monotonic() < begun + load.settle_s:
            if begun is None and MAIN_RUN in (out_dir / "bench.log").read_text(errors="replace"):
                begun = time.monotonic()
            if begun is None and time.monotonic() > end:  # another benchmark version: go by time alone
                begun = time.monotonic()
            if proc.poll() is not None:
                raise AstraError(f"the serving benchmark ended before the profile began (exit {proc.returncode}); "
                                 f"see {out_dir / 'bench.log'}")
            if not alive():
                raise AstraError("the server died under load before the profile began")
            time.sleep(0.5)
        held = wait_filled(server, load.concurrency, start_timeout_s, alive)
        if held is not None and held < FILL * load.concurrency:
            print(f"note: the server held {held} of the load's {load.concurrency} requests when the profile began")
        start_profile(server, out_dir, steps)
        return wait_traces(out_dir, timeout_s, alive)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
