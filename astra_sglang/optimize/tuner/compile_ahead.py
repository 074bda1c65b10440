"""Triton compiles ahead of the GPU, on every CPU core, into Triton's on-disk cache.

The screening worker records what its launch of each config would compile, without compiling or launching:
Triton's `knobs.runtime.jit_cache_hook` is called on every in-memory cache miss with the specialization data of
the launch (signature, constexprs, the pointer-alignment and integer attributes of the actual arguments,
options); returning True skips that compile and launch (`record`). A process pool compiles each recorded
specialization with Triton's own `JITFunction.preload` (the public way to compile from specialization data),
under a stand-in driver that names the worker's GPU target: no CUDA context, no GPU. `triton.compile` keys its
cache by the source's hash, the backend (ptxas version, arch), the options and the cache-invalidating
environment, all equal on both sides, so the worker's first launch of the config finds the cubin and only
loads it. `HitCounter` counts, through `knobs.compilation.listener`, which compiles in the worker found the
cache (the hit rate the benchmark reports).

The compile processes see no GPU (CUDA_VISIBLE_DEVICES=""), and the stand-in driver is active only around
`preload`, never while the kernel's module is imported: code that probes the device at import time believes
Triton's active driver (SGLang's FLA utils, imported with SGLang's kernels, ask it for the backend and, told
"cuda", call `torch.cuda.get_device_name(0)`: "No CUDA GPUs are available" where libcuda is present but no device
is visible). Imported as the host is (no visible device: the probes fall back as on a CPU host), the module
defines the same kernel source; the worker's hit rate checks it. A module that cannot be imported at all is not
the config's fault: its jobs come back `ahead=False` and the worker compiles those kernels itself (slower, never
wrong), the import error and where it was raised kept as the reason.

Integer arguments specialize on their value (== 1, divisible by 16): fused MoE's padded row count and token
count change with the batch size, so one config compiles again at some batch sizes; recording per batch size
catches those, and identical specializations are compiled once (`CompilePool` dedupes by digest).
"""
from __future__ import annotations

import importlib
import importlib.util
import json
import multiprocessing
import os
import sys
import threading
import time
from concurrent.futures import CancelledError, Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from pathlib import Path

from astra_sglang.optimize.tuner.screen_launch import describe
from astra_sglang.triton.screen_records import CompileJob, CompileOutcome

SIMULATED_DIR = "astra-simulated"
"""Where simulated compiles leave their marker inside the cache dir (screen_simulate.py reads it)."""


class StubDriver:
    """Triton's active driver as far as `JITFunction.preload` needs one: device 0 of a named target."""

    def __init__(self, target):
        self.target = target

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device=None) -> int:
        return 0

    def get_current_target(self):
        return self.target


def _kernel(job: CompileJob):
    """The JITFunction a job names: its module imported by name, else loaded from its file under that name."""
    module = sys.modules.get(job.module)
    if module is None:
        try:
            module = importlib.import_module(job.module)
        except ImportError:
            if not job.path:
                raise
            spec = importlib.util.spec_from_file_location(job.module, job.path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[job.module] = module
            spec.loader.exec_module(module)
    fn = module
    for part in job.qualname.split("."):
        fn = getattr(fn, part)
    return fn


_UNIMPORTABLE: dict[str, str] = {}
"""module -> why this compile process could not import it (tried once, not once per job)."""


def _located(exc: BaseException) -> str:
    """`describe(exc)` and the innermost frame it was raised in (file:line), so that a failure says where."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    where = f" (at {Path(tb.tb_frame.f_code.co_filename).name}:{tb.tb_lineno})" if tb is not None else ""
    return describe(exc)[:300 - len(where)] + where


@contextmanager
def stand_in(target: tuple[str, int, int]):
    """Triton's active driver replaced by a `StubDriver` of `target` while within; the previous one (often none
    yet) put back after."""
    from triton.backends.compiler import GPUTarget
    from triton.runtime.driver import driver

    previous = driver._active
    driver.set_active(StubDriver(GPUTarget(*target)))
    try:
        yield
    finally:
        driver._active = previous


def compile_job(job: CompileJob) -> CompileOutcome:
    """Compile one specialization into the cache (runs in a compile process)."""
    start = time.perf_counter()
    if job.kind == "simulated":
        spec = json.loads(job.data)
        marker = Path(os.environ["TRITON_CACHE_DIR"]) / SIMULATED_DIR / job.digest()
        if marker.exists():
            return CompileOutcome(ok=True, cached=True)
        time.sleep(spec.get("seconds", 0.0))
        if spec.get("fail"):
            return CompileOutcome(ok=False, seconds=time.perf_counter() - start, reason=spec["fail"])
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(job.data)
        return CompileOutcome(ok=True, seconds=time.perf_counter() - start)
    if job.module in _UNIMPORTABLE:
        return CompileOutcome(ok=False, ahead=False, reason=_UNIMPORTABLE[job.module])
    try:
        kernel = _kernel(job)  # before the stand-in driver: see the module's docstring
    except Exception as exc:  # noqa: BLE001 - the host's fault, not the config's: the worker compiles it
        _UNIMPORTABLE[job.module] = f"compile process cannot import {job.module}: {_located(exc)}"[:300]
        return CompileOutcome(ok=False, ahead=False, seconds=time.perf_counter() - start,
                              reason=_UNIMPORTABLE[job.module])
    counter = HitCounter()
    try:
        with stand_in(job.target), counter:
            kernel.preload(job.data)
    except Exception as exc:  # noqa: BLE001 - a config Triton cannot compile fails alone
        return CompileOutcome(ok=False, seconds=time.perf_counter() - start, reason=_located(exc))
    return CompileOutcome(ok=True, seconds=time.perf_counter() - start, cached=counter.hits > 0)


class HitCounter:
    """Counts Triton compiles that found the on-disk cache (hits) and those that ran (misses), while active."""

    def __init__(self):
        self.hits = self.misses = 0
        self._previous = None

    def _listen(self, *, cache_hit: bool, **_) -> None:
        if cache_hit:
            self.hits += 1
        else:
            self.misses += 1

    def __enter__(self) -> "HitCounter":
        import triton

        self._previous = triton.knobs.compilation.listener
        triton.knobs.compilation.listener = self._listen
        return self

    def __exit__(self, *exc) -> None:
        import triton

        triton.knobs.compilation.listener = self._previous


@contextmanager
def record(jobs: list[CompileJob]):
    """Within: every Triton launch whose kernel is not in memory yet is recorded into `jobs` and skipped (not
    compiled, not launched). What the launches compute meanwhile is garbage: callers only record."""
    import triton
    from triton.runtime.driver import driver

    target = driver.active.get_current_target()
    where = (target.backend, int(target.arch), int(target.warp_size))

    def hook(*, fn, compile, **_) -> bool:
        module = sys.modules.get(fn.module)
        jobs.append(CompileJob(module=fn.module, path=getattr(module, "__file__", "") or "", qualname=fn.name,
                               data=compile["specialization_data"], target=where))
        return True

    previous = triton.knobs.runtime.jit_cache_hook
    triton.knobs.runtime.jit_cache_hook = hook
    try:
        yield jobs
    finally:
        triton.knobs.runtime.jit_cache_hook = previous


def _compile_process(cache_dir: str) -> None:
    """A compile process sees no GPU (it never needs one: no CUDA context per process) and shares the cache."""
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    os.environ["TRITON_CACHE_DIR"] = cache_dir


class CompilePool:
    """Compile jobs on `workers` processes, each distinct specialization once. A compile process that dies
    (a crash inside Triton's compiler) breaks the pool: it is started again and the job retried once, then
    failed. `cancel_pending` drops what has not started (a bucket whose budget ran out leaves the next bucket's
    compiles the whole pool)."""

    def __init__(self, workers: int, cache_dir: str | Path):
        self.workers, self.cache_dir = max(1, workers), str(cache_dir)
        self._lock = threading.Lock()
        self._futures: dict[str, Future] = {}
        self._inner: dict[str, Future] = {}
        self._executor = self._start()
        self.submitted = 0
        self.seconds = 0.0
        self.failed = 0
        self.cached = 0
        self.restarts = 0

    def _start(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=_compile_process, initargs=(self.cache_dir,))

    @property
    def jobs(self) -> int:
        """Distinct specializations submitted so far (cancelled ones included)."""
        return self.submitted

    def submit(self, job: CompileJob) -> Future:
        """The job's future (CompileOutcome); the same future for a specialization submitted before."""
        with self._lock:
            digest = job.digest()
            if digest not in self._futures:
                outer: Future = Future()
                self._futures[digest] = outer
                self.submitted += 1
                self._run(job, outer, retried=False)
            return self._futures[digest]

    def _run(self, job: CompileJob, outer: Future, retried: bool) -> None:
        """Called with the lock held."""
        executor = self._executor
        try:
            inner = executor.submit(compile_job, job)
        except BrokenProcessPool:  # broke before its failed jobs called back
            executor = self._executor = self._start()
            self.restarts += 1
            inner = executor.submit(compile_job, job)
        self._inner[job.digest()] = inner
        inner.add_done_callback(lambda f: self._done(job, outer, f, executor, retried))

    def _done(self, job: CompileJob, outer: Future, inner: Future, executor, retried: bool) -> None:
        try:
            outcome = inner.result()
        except CancelledError:
            with self._lock:  # submitted again later, it compiles then
                self._futures.pop(job.digest(), None)
                self._inner.pop(job.digest(), None)
            outer.cancel()
            return
        except BrokenProcessPool:
            if not retried:
                with self._lock:
                    if self._executor is executor:  # the first of its failed jobs to get here starts a new one
                        executor.shutdown(wait=False)
                        self._executor = self._start()
                        self.restarts += 1
                    self._run(job, outer, retried=True)
                return
            outcome = CompileOutcome(ok=False, reason="the compile process died on it (twice)")
        except Exception as exc:  # noqa: BLE001 - e.g. a job that does not pickle: fails alone
            outcome = CompileOutcome(ok=False, reason=f"{type(exc).__name__}: {exc}"[:300])
        with self._lock:
            self.seconds += outcome.seconds
            self.failed += not outcome.ok
            self.cached += outcome.cached
            self._inner.pop(job.digest(), None)
        outer.set_result(outcome)

    def cancel_pending(self) -> int:
        """Cancel every job not started yet; returns how many."""
        with self._lock:
            waiting = list(self._inner.values())
        return sum(f.cancel() for f in waiting)

    def close(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> "CompilePool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
