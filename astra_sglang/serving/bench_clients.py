"""The benchmark clients of a design run (serving/runner.py): one long-lived process per server port
(serving/bench_worker.py), started with the run so that its import overlaps the first servers' start, serving the
warm-up round and every timed round of every period; each round is one request to it with the argv a per-round
process would get, and its metrics are read from the same output file. The arms' clients are separate processes,
so the two arms of a crossover round run at once, as before.

Where SGLang's benchmark cannot run in-process (the worker says why in one line), every round starts its own
`python -m sglang.benchmark.serving` as before (ClientSettings.run).
"""
from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
import time
from pathlib import Path

from rich.console import Console

from astra_sglang.errors import AstraError
from astra_sglang.serving import server
from astra_sglang.serving.client import ClientSettings

WORKER = "astra_sglang.serving.bench_worker"
READY_TIMEOUT_S = 300.0
"""How long a client's import may take (18-30 s on the H200 of 2026-11-27, with the servers starting beside it)."""


class BenchClient:
    """One worker process and its pipes; one request at a time (one arm's rounds are sequential)."""

    def __init__(self, log: Path, python: str = sys.executable):
        self.log = log
        with open(log, "ab") as fh:
            self.proc = subprocess.Popen([python, "-m", WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=fh, env=server.strip_patch_env(dict(os.environ)), bufsize=0,
                                         start_new_session=True)
        self._why: str | None = None

    def _read(self, timeout_s: float) -> dict:
        end, line = time.monotonic() + timeout_s, b""
        while not line.endswith(b"\n"):
            left = end - time.monotonic()
            if left <= 0 or not select.select([self.proc.stdout], [], [], left)[0]:
                raise AstraError(f"the benchmark client answered nothing in {timeout_s:.0f} s; its log: {self.log}")
            chunk = self.proc.stdout.readline()
            if not chunk:
                raise AstraError(f"the benchmark client exited ({self.proc.wait()}); its log: {self.log}")
            line += chunk
        return json.loads(line)

    def why_not(self, timeout_s: float = READY_TIMEOUT_S) -> str:
        """'' once the worker has SGLang's benchmark imported, else why it cannot run it in-process."""
        if self._why is None:
            try:
                hello = self._read(timeout_s)
            except AstraError as exc:
                hello = {"ready": False, "why": str(exc).splitlines()[0]}
            self._why = "" if hello.get("ready") else str(hello.get("why") or "the client did not start")
        return self._why

    def run(self, argv: list[str], timeout_s: float) -> None:
        """One round: the benchmark with `argv` (what follows `python -m sglang.benchmark.serving`)."""
        self.proc.stdin.write((json.dumps({"argv": argv}) + "\n").encode())
        self.proc.stdin.flush()
        reply = self._read(timeout_s)
        if not reply.get("ok"):
            raise AstraError(f"benchmark failed:\n{str(reply.get('error'))[-3000:]}")

    def close(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()


class ClientPool:
    """The clients of one run, one per port; `run` is ClientSettings.run's replacement."""
    IN_PROCESS = True
    """False: every round its own process (the tests that replace ClientSettings.run set this)."""

    def __init__(self, settings: ClientSettings, model_path: str, out: Path, console: Console | None = None):
        self.settings, self.model_path, self.out = settings, model_path, Path(out)
        self.console = console or Console(highlight=False)
        self.clients: dict[int, BenchClient] = {}
        self._lock = threading.Lock()
        self._said: set[int] = set()
        """Ports whose way of running rounds the console has been told."""

    def start(self, ports) -> None:
        """A client for each port, once per run before its first round (their imports run while the servers
        start); a port that already has one keeps it."""
        if not self.IN_PROCESS:
            return
        with self._lock:
            for port in ports:
                if port not in self.clients:
                    self.clients[port] = BenchClient(self.out / f"client-{port}.log")

    def _client(self, port: int) -> BenchClient | None:
        """The port's long-lived client, or None where its rounds run a process each; which of the two is
        decided per port (each worker imports SGLang's benchmark on its own) and said once per port."""
        client = self.clients.get(port)
        why = (client.why_not() if client is not None else
               "no long-lived client was started for it" if self.IN_PROCESS else "the long-lived client is turned off")
        with self._lock:
            if port not in self._said:
                self._said.add(port)
                self.console.out(f"benchmark client of port {port}: " + (
                    f"a new process every round: {why}" if why else
                    "one process for the whole run, SGLang's benchmark imported once"))
        return None if why else client

    def run(self, port: int, bench_file: Path, timeout_s: float = 900.0) -> dict:
        """One round against the server at `port`: its metrics, as ClientSettings.run returns them."""
        client = self._client(port)
        if client is None:
            return self.settings.run(self.model_path, port, bench_file, timeout_s)
        bench_file.unlink(missing_ok=True)
        client.run(self.settings.argv(self.model_path, port, bench_file)[3:], timeout_s)
        return server.read_bench(bench_file)

    def close(self) -> None:
        with self._lock:
            clients, self.clients = list(self.clients.values()), {}
        for client in clients:
            client.close()
