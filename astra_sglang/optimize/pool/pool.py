"""Candidates in flight on one host: nvcc builds on the CPU cores overlap GPU evaluations, and every GPU
has one evaluation worker, so two evaluations never share a GPU while they time.

`submit(req)` returns a Future at once. A build thread compiles the candidate (and a baseline file) into
the shared build cache (harness.build.build_library); a failed build is answered there, with no GPU. A
built candidate waits in one queue that every GPU worker takes from; the worker calls the harness's
isolated `evaluate`, whose child finds the library in the cache. With several GPUs each worker is a process
of its own with CUDA_VISIBLE_DEVICES set to its GPU (the evaluation child inherits it); with no GPU, or the
one GPU the children would use anyway, it is a thread. Compile-only requests never wait for a GPU.
"""
from __future__ import annotations

import multiprocessing
import os
import queue
import threading
import time
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from typing import Callable

from astra_sglang.harness.records import BuildInfo, EvalRequest, EvalResult
from astra_sglang.optimize.pool.devices import GpuFacts, probe, visible_gpus
from astra_sglang.optimize.pool.stats import PoolStats, Span

Evaluator = Callable[[EvalRequest], EvalResult]
Builder = Callable[[str, dict, str | None], BuildInfo]


def harness_evaluate(req: EvalRequest) -> EvalResult:
    from astra_sglang.harness.isolate import evaluate

    return evaluate(req)


def harness_build(path: str, defines: dict, arch: str | None) -> BuildInfo:
    from astra_sglang.harness.build import build_library

    return build_library(path, defines, arch)


def build_failure(req: EvalRequest, info: BuildInfo) -> EvalResult:
    """The evaluation's answer for a candidate that does not build (what the harness says in that case)."""
    lines = [ln.strip() for ln in info.log.splitlines() if "error" in ln.lower()] or info.log.strip().splitlines()
    return EvalResult(kernel=req.kernel, candidate=req.candidate.name(), stage="build", build=info,
                      reason="build failed: " + (lines[0] if lines else "(no compiler output)")[:300])


def _pin(gpu: str) -> None:
    os.environ["CUDA_VISIBLE_DEVICES"] = gpu


def _already_on(gpus: list[str]) -> bool:
    """One GPU that this process's children use anyway (no pinning needed: a thread worker will do)."""
    inherited = os.environ.get("CUDA_VISIBLE_DEVICES")
    return len(gpus) == 1 and (inherited == gpus[0] or (inherited is None and gpus[0] == "0"))


class LocalPool:
    """One host's builds and GPUs (see the module docstring). Use as a context manager, or close().

    Default: the harness's evaluate and build_library. A caller's own evaluator builds nothing ahead unless
    it also gives a builder (a stand-in evaluator may not build real sources at all)."""

    def __init__(self, gpus: list[str] | None = None, evaluator: Evaluator | None = None,
                 builder: Builder | None = None, build_workers: int | None = None):
        self.gpus = visible_gpus() if gpus is None else list(gpus)
        if evaluator is None:
            evaluator, builder = harness_evaluate, builder or harness_build
        self.evaluator, self.builder = evaluator, builder
        self.lanes = self.gpus or ["-"]  # no GPU: one worker, the harness answers that it has no GPU
        self._stats = PoolStats(lanes=self.lanes)
        self._lock = threading.Lock()
        self._ready: queue.Queue = queue.Queue()
        self._builds = ThreadPoolExecutor(max_workers=build_workers or os.cpu_count() or 2,
                                          thread_name_prefix="astra-build")
        spawn = multiprocessing.get_context("spawn")
        self._procs = {gpu: ProcessPoolExecutor(1, mp_context=spawn, initializer=_pin, initargs=(gpu,))
                       for gpu in self.gpus} if self.gpus and not _already_on(self.gpus) else {}
        self._threads = [threading.Thread(target=self._lane, args=(gpu,), daemon=True, name=f"astra-gpu-{gpu}")
                         for gpu in self.lanes]
        for t in self._threads:
            t.start()
        self._facts: GpuFacts | None = None
        self._facts_lock = threading.Lock()
        self._cancelled = False

    # -- public ------------------------------------------------------------------------------------
    def submit(self, req: EvalRequest) -> Future:
        future: Future = Future()
        self._builds.submit(self._build, req, future)
        return future

    def map(self, reqs: list[EvalRequest]) -> list[EvalResult]:
        return [f.result() for f in [self.submit(r) for r in reqs]]

    def exclusive(self, fn: Callable, *args) -> Future:
        """fn(*args) on a GPU worker, alone on its GPU like an evaluation (a profiler run: ncu's replays
        would disturb a timing on the same GPU). With several GPUs `fn` must pickle."""
        future: Future = Future()
        self._ready.put(((fn, args), future))
        return future

    def stats(self) -> PoolStats:
        with self._lock:
            return self._stats.model_copy(deep=True)

    def gpu_facts(self) -> GpuFacts:
        """The first GPU's facts, probed once on its worker (a CUDA context made beside a timing disturbs it)."""
        with self._facts_lock:  # not self._lock: a worker takes that one to record what it did
            if self._facts is None:
                self._facts = self.exclusive(probe).result() if self.gpus else GpuFacts()
            return self._facts

    def cancel(self) -> int:
        """Cancel every request not yet on a GPU (a budget ran out); returns how many. Running evaluations
        finish; later submissions are cancelled too."""
        self._cancelled, count = True, 0
        while True:
            try:
                item = self._ready.get_nowait()
            except queue.Empty:
                return count
            if item is None:  # a close() sentinel: leave it for its lane
                self._ready.put(None)
                return count
            count += isinstance(item[0], EvalRequest) and item[1].cancel()

    def close(self) -> None:
        self._builds.shutdown(wait=True)
        for _ in self._threads:
            self._ready.put(None)
        for t in self._threads:
            t.join()
        for executor in self._procs.values():
            executor.shutdown(wait=True)

    def __enter__(self) -> "LocalPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- stages ------------------------------------------------------------------------------------
    def _build(self, req: EvalRequest, future: Future) -> None:
        if self._cancelled:
            future.cancel()
            return
        try:
            for source in (req.candidate, req.baseline) if self.builder is not None else ():
                if source is None or source.is_python or not os.path.isfile(source.path):
                    continue  # a missing file: the evaluation reports it
                start = time.time()
                info = self.builder(source.path, source.defines, req.arch)
                self._record("build", Span(lane="cpu", start=start, end=time.time(), cached=info.cached))
                if not info.ok and source is req.candidate:
                    future.set_result(build_failure(req, info))
                    return
            if req.compile_only:
                future.set_result(self.evaluator(req))
                return
        except BaseException as exc:  # noqa: BLE001 - the caller sees it on the future
            future.set_exception(exc)
            return
        if self._cancelled:
            future.cancel()
        else:
            self._ready.put((req, future))

    def _lane(self, gpu: str) -> None:
        executor = self._procs.get(gpu)
        while (item := self._ready.get()) is not None:
            req, future = item
            fn, args = (self.evaluator, (req,)) if isinstance(req, EvalRequest) else req
            start = time.time()
            try:
                result = executor.submit(fn, *args).result() if executor else fn(*args)
            except BaseException as exc:  # noqa: BLE001 - the caller sees it on the future
                future.set_exception(exc)
                continue
            finally:
                if fn is self.evaluator:
                    self._record("eval", Span(lane=gpu, start=start, end=time.time()))
            future.set_result(result)

    def _record(self, kind: str, span: Span) -> None:
        with self._lock:
            (self._stats.evaluations if kind == "eval" else self._stats.builds).append(span)
