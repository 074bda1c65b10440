"""Per-process engagement and shadow statistics: live counters, a JSON file per process, aggregation.

Counters are plain attributes bumped on the call path (no locks, no allocation). Files are written
atomically at exit and every few seconds by a daemon thread, because SGLang kills its workers with
signals at shutdown (atexit never runs there).
"""
from __future__ import annotations

import atexit
import os
import socket
import statistics
import sys
import threading
import time
from pathlib import Path

from pydantic import BaseModel, Field

ENV_STATS_DIR = "ASTRA_SGLANG_STATS_DIR"
ENV_STATS_INTERVAL = "ASTRA_SGLANG_STATS_INTERVAL"
MAX_SAMPLES = 512


class TimingSummary(BaseModel):
    """Sampled per-call times (us) of one side, host-visible: CUDA events on GPU, perf_counter on CPU."""

    samples: int = 0
    median_us: float | None = None
    p10_us: float | None = None
    p90_us: float | None = None


class OpRecord(BaseModel):
    op: str
    targets: list[str] = Field(default_factory=list)
    """Every "module:attr" rebound to this op in this process (the target first, then `from x import f` copies)."""
    calls: int = 0
    """Python-level calls of the patched name (CUDA-graph replays do not pass through Python)."""
    kernel_calls: int = 0
    fallbacks: int = 0
    """Calls served by the original: unsupported dtype/shape/device, ABI ASTRA_UNSUPPORTED, or disabled."""
    fallback_reasons: dict[str, int] = Field(default_factory=dict)
    """Why, for the Python path's fallbacks: e.g. "argument fused_args (not in the spec) given": 12."""
    deferred: int = 0
    """Calls left to the original on purpose: the manifest's `defer` (SGLang's kernel measured as fast there)."""
    shadow_checks: int = 0
    shadow_mismatches: int = 0
    disabled: bool = False
    disabled_reason: str = ""
    patched: TimingSummary = TimingSummary()
    original: TimingSummary = TimingSummary()


class ProcessStats(BaseModel):
    pid: int
    host: str
    argv: list[str]
    mechanism: str
    started: float
    updated: float
    ops: dict[str, OpRecord] = Field(default_factory=dict)


def _summary(samples: list[float]) -> TimingSummary:
    if not samples:
        return TimingSummary()
    ordered = sorted(samples)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return TimingSummary(samples=len(ordered), median_us=statistics.median(ordered), p10_us=pick(0.1),
                         p90_us=pick(0.9))


class OpStats:
    """Live counters of one op in this process."""

    __slots__ = ("op", "targets", "calls", "kernel_calls", "fallbacks", "deferred", "shadow_checks",
                 "shadow_mismatches", "disabled_reason", "patched_us", "original_us", "native", "reasons")

    def __init__(self, op: str):
        self.op = op
        self.targets: list[str] = []
        self.calls = self.kernel_calls = self.fallbacks = self.deferred = 0
        self.shadow_checks = self.shadow_mismatches = 0
        self.disabled_reason = ""
        self.reasons: dict[str, int] = {}
        self.native: list = []
        """C++ FastOps (patching/fastcall.cpp) serving calls of this op: their counters add to these."""
        self.patched_us: list[float] = []
        self.original_us: list[float] = []

    def fallback(self, reason: str) -> None:
        """One call served by the original, and why (a handful of distinct reasons per op)."""
        self.fallbacks += 1
        self.reasons[reason] = self.reasons.get(reason, 0) + 1

    def add_timing(self, patched_us: float, original_us: float) -> None:
        if len(self.patched_us) >= MAX_SAMPLES:  # keep the newest half
            del self.patched_us[: MAX_SAMPLES // 2], self.original_us[: MAX_SAMPLES // 2]
        self.patched_us.append(patched_us)
        self.original_us.append(original_us)

    def total_calls(self) -> int:
        return self.calls + sum(f.calls + f.deferred for f in self.native)

    def total_deferred(self) -> int:
        return self.deferred + sum(f.deferred for f in self.native)

    def total_kernel_calls(self) -> int:
        return self.kernel_calls + sum(f.calls for f in self.native)  # every fast-path call is a launch

    def record(self) -> OpRecord:
        return OpRecord(op=self.op, targets=list(self.targets), calls=self.total_calls(),
                        kernel_calls=self.total_kernel_calls(),
                        fallbacks=self.fallbacks, fallback_reasons=dict(self.reasons), deferred=self.total_deferred(), shadow_checks=self.shadow_checks,
                        shadow_mismatches=self.shadow_mismatches, disabled=bool(self.disabled_reason),
                        disabled_reason=self.disabled_reason, patched=_summary(self.patched_us),
                        original=_summary(self.original_us))


class StatsWriter:
    """Owns this process's OpStats and writes `<dir>/astra-<host>-<pid>.json`."""

    def __init__(self, directory: str | Path | None, mechanism: str, interval_s: float | None = None):
        self.directory = Path(directory) if directory else None
        self.mechanism = mechanism
        self.ops: dict[str, OpStats] = {}
        self.started = time.time()
        self.interval_s = interval_s if interval_s is not None else float(os.environ.get(ENV_STATS_INTERVAL, "10"))
        self._thread: threading.Thread | None = None
        if self.directory:
            atexit.register(self.write)

    def op(self, name: str) -> OpStats:
        return self.ops.setdefault(name, OpStats(name))

    @property
    def path(self) -> Path | None:
        return self.directory / f"astra-{socket.gethostname()}-{os.getpid()}.json" if self.directory else None

    def snapshot(self) -> ProcessStats:
        return ProcessStats(pid=os.getpid(), host=socket.gethostname(), argv=list(sys.argv),
                            mechanism=self.mechanism, started=self.started, updated=time.time(),
                            ops={name: s.record() for name, s in self.ops.items()})

    def write(self) -> Path | None:
        path = self.path
        if path is None:
            return None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            staged = path.with_suffix(f".json.tmp{threading.get_ident()}")
            staged.write_text(self.snapshot().model_dump_json(indent=1))
            os.replace(staged, path)  # a reader never sees half a file
        except OSError as exc:  # stats must never take the server down
            print(f"astra-sglang: cannot write stats {path}: {exc}", file=sys.stderr)
        return path

    def start(self) -> None:
        if self.directory is None or self._thread is not None or self.interval_s <= 0:
            return
        self._thread = threading.Thread(target=self._loop, name="astra-stats", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            time.sleep(self.interval_s)
            self.write()


def load_stats(directory: str | Path) -> list[ProcessStats]:
    out = []
    for path in sorted(Path(directory).glob("astra-*.json")):
        try:
            out.append(ProcessStats.model_validate_json(path.read_text()))
        except Exception:  # noqa: BLE001 - a file being replaced or foreign: skip it
            continue
    return out
