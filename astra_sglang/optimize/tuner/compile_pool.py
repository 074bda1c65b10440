"""The compile processes behind the screening (compile_ahead.py's jobs): every distinct specialization compiled
once, the most urgent first.

A job is submitted with a priority (a tuple; smaller is sooner, equal ones first come first served): no more jobs
than processes are handed to them at a time, the rest wait here, so that a job submitted later with a smaller
priority overtakes them, and one submitted again with a smaller priority than it waits with moves up. The
screening schedule (screen_schedule.py) gives the units its GPUs are timing now the smallest and the units they
take next the following ones, so the compile processes work for the GPU that needs them next: with one
first-in-first-out queue, a unit started after others were queued ahead waited behind all of them (RUN_B in
moe_costs.py: mixtral@16's second config waited 61 s for what was left of 6,006 compiles queued for Qwen3's
units, screened later).

The processes run at a lower CPU priority (`NICE`) than the screening workers, whose host code (recording a
unit's compiles, capturing a config's graph) would otherwise queue behind them.
"""
from __future__ import annotations

import heapq
import itertools
import multiprocessing
import os
import threading
from concurrent.futures import CancelledError, Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from astra_sglang.optimize.tuner.compile_ahead import compile_job
from astra_sglang.triton.screen_records import CompileJob, CompileOutcome

NICE = 10
"""Added to the compile processes' niceness (`os.nice`): the CPU goes to the workers first when both want it."""


def _compile_process(cache_dir: str) -> None:
    """A compile process sees no GPU (it never needs one: no CUDA context per process) and shares the cache."""
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    os.environ["TRITON_CACHE_DIR"] = cache_dir
    try:
        os.nice(NICE)
    except OSError:  # a platform without it: the same compiles, at the workers' priority
        pass


class CompilePool:
    """Compile jobs on `workers` processes, each distinct specialization once, by priority (see the module
    docstring). A compile process that dies (a crash inside Triton's compiler) breaks the pool: it is started
    again and the job retried once, then failed. `cancel_pending` drops what has not started (a bucket whose
    budget ran out leaves the next bucket's compiles the whole pool)."""

    def __init__(self, workers: int, cache_dir: str | Path):
        self.workers, self.cache_dir = max(1, workers), str(cache_dir)
        self._lock = threading.Lock()
        self._futures: dict[str, Future] = {}
        self._inner: dict[str, Future] = {}
        self._waiting: dict[str, tuple[CompileJob, Future, tuple]] = {}
        self._queue: list[tuple[tuple, int, str]] = []
        self._order = itertools.count()
        self._running = 0
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

    def submit(self, job: CompileJob, priority: tuple = ()) -> Future:
        """The job's future (CompileOutcome); the same future for a specialization submitted before (moved up to
        `priority` if it still waits with a larger one)."""
        with self._lock:
            digest = job.digest()
            outer = self._futures.get(digest)
            if outer is None:
                outer = self._futures[digest] = Future()
                self.submitted += 1
                self._wait(digest, job, outer, priority)
            elif digest in self._waiting and priority < self._waiting[digest][2]:
                self._wait(digest, job, outer, priority)
            self._dispatch()
            return outer

    def _wait(self, digest: str, job: CompileJob, outer: Future, priority: tuple) -> None:
        """Called with the lock held; an earlier entry of the digest is left in the heap, skipped when popped."""
        self._waiting[digest] = (job, outer, priority)
        heapq.heappush(self._queue, (priority, next(self._order), digest))

    def _dispatch(self) -> None:
        """Hand the most urgent waiting jobs to the processes, as many as they run at once (lock held)."""
        while self._running < self.workers and self._queue:
            priority, _, digest = heapq.heappop(self._queue)
            entry = self._waiting.get(digest)
            if entry is None or entry[2] != priority:
                continue  # moved up (its newer entry counts) or handed out already
            del self._waiting[digest]
            self._running += 1
            self._run(entry[0], entry[1], retried=False)

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
                self._forget(job.digest())
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
            self._running -= 1
            self._dispatch()
        outer.set_result(outcome)

    def _forget(self, digest: str) -> None:
        """A job that will not run (lock held): a later submit of its specialization compiles it anew."""
        self._futures.pop(digest, None)
        if self._inner.pop(digest, None) is not None:
            self._running -= 1
        self._dispatch()

    def cancel_pending(self) -> int:
        """Cancel every job not started yet; returns how many."""
        with self._lock:
            waiting = [outer for _, outer, _ in self._waiting.values()]
            for digest in list(self._waiting):
                self._futures.pop(digest, None)
            self._waiting.clear()
            self._queue.clear()
            handed = list(self._inner.values())
        for outer in waiting:
            outer.cancel()
        return len(waiting) + sum(f.cancel() for f in handed)

    def close(self) -> None:
        self.cancel_pending()
        self._executor.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> "CompilePool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
