"""The pool's side of one screening worker: start it on its GPU, ask it, notice when it is lost, replace it.

A request is lost when the worker dies (its pipe closes: a segfault, an illegal address it exited on), stops
beating (stale: `stale_s` without a heartbeat) or does not answer in `timeout` seconds (hang: a kernel that
never ends keeps the heartbeat going but not the answer). The worker is then killed and started again, with
the bucket it had prepared prepared again.
"""
from __future__ import annotations

import multiprocessing
import signal
import time
from dataclasses import dataclass

from astra_sglang.optimize.tuner import screen_worker


class WorkerLost(Exception):
    def __init__(self, stage: str, reason: str):
        super().__init__(reason)
        self.stage, self.reason = stage, reason


@dataclass(frozen=True)
class WorkerSettings:
    target: str
    """`module:factory` of the op's ScreenLaunch."""
    options: dict
    beat_s: float = 0.5
    stale_s: float = 20.0
    start_timeout_s: float = 300.0
    """Starting includes importing the op's code (SGLang: tens of seconds)."""
    prepare_timeout_s: float = 600.0
    jobs_timeout_s: float = 600.0


def _exit_text(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}" + (" (a fatal device error)" if code == screen_worker.FATAL_EXIT else "")


class WorkerHandle:
    def __init__(self, gpu: str | None, settings: WorkerSettings):
        self.gpu, self.settings = gpu, settings
        self.name = f"gpu{gpu}" if gpu is not None else "cpu"
        self.bucket = None
        self.restarts = 0
        self.proc = self.conn = self.clock = None

    def start(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.clock = ctx.Value("d", time.time())
        self.conn, child = ctx.Pipe()
        s = self.settings
        # Not a daemon: the op's code may start processes of its own (Triton's and torch's compile pools).
        self.proc = ctx.Process(target=screen_worker.main, args=(child, s.target, s.options, self.gpu, self.clock,
                                                                  s.beat_s), name=f"astra-screen-{self.name}")
        self.proc.start()
        child.close()
        self._wait(s.start_timeout_s, "start")

    def ask(self, msg: tuple, timeout: float):
        self.conn.send(msg)
        return self._wait(timeout, msg[0])

    def _wait(self, timeout: float, what: str):
        start = time.time()
        while True:
            if self.conn.poll(0.05):
                try:
                    reply = self.conn.recv()
                except (EOFError, OSError):
                    self.proc.join(5)
                    raise WorkerLost("crash", f"worker {self.name} {_exit_text(self.proc.exitcode)} during {what}")
                if reply[0] == "error":
                    raise WorkerLost("crash", f"worker {self.name} failed during {what}: {reply[1]}")
                return reply
            if not self.proc.is_alive() and not self.conn.poll(0.05):
                raise WorkerLost("crash", f"worker {self.name} {_exit_text(self.proc.exitcode)} during {what}")
            now = time.time()
            if now - self.clock.value > self.settings.stale_s:
                raise WorkerLost("stale", f"worker {self.name} stopped beating for {now - self.clock.value:.0f} s "
                                          f"during {what}")
            if now - start > timeout:
                raise WorkerLost("hang", f"no answer in {timeout:.0f} s during {what}")

    def prepare(self, bucket) -> float:
        self.bucket = None  # until it answers: a worker lost meanwhile has nothing prepared
        seconds = self.ask(("prepare", bucket), self.settings.prepare_timeout_s)[1]
        self.bucket = bucket
        return seconds

    def alive(self) -> bool:
        return self.proc is not None and self.proc.is_alive()

    def restart(self) -> None:
        """Kill it, start a new one and prepare the bucket it had."""
        self.kill()
        self.restarts += 1
        self.start()
        if self.bucket is not None:
            self.prepare(self.bucket)

    def kill(self) -> None:
        if self.proc is not None and self.proc.is_alive():
            self.proc.kill()
        if self.proc is not None:
            self.proc.join(10)
        if self.conn is not None:
            self.conn.close()

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.is_alive():
            try:
                self.conn.send(("stop",))
            except (BrokenPipeError, OSError):
                pass
            self.proc.join(5)
        self.kill()
