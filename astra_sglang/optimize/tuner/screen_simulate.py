"""A screening launch without a GPU: the worker, the pool, the compile-ahead path and Ray run unchanged, only the
GPU is a stand-in (tests, the benchmark's --simulate).

Each config compiles two specializations (as fused MoE's two GEMMs do), simulated: the compile process sleeps
`compile_s` and leaves a marker in the cache dir, the worker's first call finds it (a hit) or compiles itself (a
miss: the same sleep). With `per_bucket`, a config's specializations differ from one bucket to the next (as fused
MoE's did on an H200 between batch sizes 16 and 64: moe_costs.RUN_B); without, every bucket shares them. Its time comes from `landscape` ("module:function" of (config, bucket, **landscape_args)
-> microseconds), else from a hash of the config; timing one config takes `call_s` of wall time. `faults` makes a config misbehave
as real ones can ("*": every config, a broken set-up):

    segv     the worker dies of a segfault            illegal  a CUDA illegal address (the worker exits)
    hang     its call never returns                    stale    the worker freezes (SIGSTOP: no heartbeat)
    compile  Triton cannot compile it                  oom      it does not fit the GPU (OutOfResources)
    wrong    wrong results                             raise    a Python error in the launch
"""
from __future__ import annotations

import importlib
import json
import os
import signal
import time
import zlib
from pathlib import Path

from astra_sglang.optimize.tuner.compile_ahead import SIMULATED_DIR
from astra_sglang.optimize.tuner.screen_launch import Checked, Timed, cuda_fatal
from astra_sglang.triton.screen_records import CompileJob

GEMMS = ("gemm1", "gemm2")


class OutOfResources(Exception):
    """Named as Triton's: the worker reads the stage from the name."""


class _Counter:
    def __init__(self):
        self.hits = self.misses = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


def hashed_us(config: str, bucket) -> float:
    """A deterministic landscape: 100-300 us by a hash of the config and bucket."""
    return 100.0 + 200.0 * (zlib.crc32(f"{config}@{bucket}".encode()) % 10_000) / 10_000


class SimulatedLaunch:
    def __init__(self, faults: dict[str, str] | None = None, compile_s: float = 0.02, call_s: float = 0.005,
                 landscape: str | None = None, landscape_args: dict | None = None, per_bucket: bool = False):
        self.faults, self.compile_s, self.call_s = dict(faults or {}), compile_s, call_s
        self.per_bucket = per_bucket
        if landscape:
            module, _, name = landscape.partition(":")
            self.landscape = getattr(importlib.import_module(module), name)
        else:
            self.landscape = hashed_us
        self.landscape_args = dict(landscape_args or {})
        self.bucket = None
        self.loaded: set[str] = set()
        self._counter = _Counter()


    def _fault(self, config: str) -> str | None:
        """The config's fault; "*" names one for every config (a broken set-up)."""
        return self.faults.get(config, self.faults.get("*"))
    def prepare(self, bucket) -> None:
        self.bucket = bucket

    def _loaded_key(self, config: str):
        return (config, self.bucket) if self.per_bucket else config

    def jobs(self, config: str) -> list[CompileJob]:
        if self._loaded_key(config) in self.loaded:
            return []
        fail = "CompilationError: simulated" if self._fault(config) == "compile" else ""
        spec = {"config": config, "gemm": None, "seconds": self.compile_s, "fail": fail}
        if self.per_bucket:
            spec["bucket"] = self.bucket
        return [CompileJob(kind="simulated", module=__name__, qualname=gemm, target=("simulated", 0, 0),
                           data=json.dumps({**spec, "gemm": gemm})) for gemm in GEMMS]

    def counter(self) -> _Counter:
        self._counter = _Counter()
        return self._counter

    def _load(self, config: str) -> None:
        if self._loaded_key(config) in self.loaded:
            return
        for job in self.jobs(config):
            marker = Path(os.environ["TRITON_CACHE_DIR"]) / SIMULATED_DIR / job.digest()
            if marker.exists():
                self._counter.hits += 1
                continue
            self._counter.misses += 1
            time.sleep(self.compile_s)
            if self._fault(config) == "compile":
                raise type("CompilationError", (Exception,), {})("simulated compile failure")
        self.loaded.add(self._loaded_key(config))

    def check(self, config: str) -> Checked:
        fault = self._fault(config)
        if fault == "segv":
            os.kill(os.getpid(), signal.SIGSEGV)
        if fault == "stale":
            os.kill(os.getpid(), signal.SIGSTOP)
        if fault == "hang":
            time.sleep(10_000)
        if fault == "illegal":
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        if fault == "oom":
            raise OutOfResources("out of resource: shared memory, Required: 300000, Hardware limit: 232448")
        if fault == "raise":
            raise ValueError("simulated launch error")
        self._load(config)
        return Checked(error=5.0 if fault == "wrong" else 0.1)

    def time(self, config: str, cutoff_us: float | None) -> Timed:
        us = float(self.landscape(config, self.bucket, **self.landscape_args))
        if cutoff_us is not None and us > cutoff_us:
            time.sleep(self.call_s / 5)
            return Timed(us=us, spread=0.0, replays=1, cut=True)
        time.sleep(self.call_s)
        return Timed(us=us, spread=0.01, replays=10)

    def fatal(self, exc: BaseException) -> bool:
        return cuda_fatal(exc)
