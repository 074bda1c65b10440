"""One host's screening: a worker per GPU and the compile pool feeding them all.

A pool lives across buckets and phases (a worker imports the op's code once: SGLang takes ~20 s); `add` starts
workers on more GPUs, `prepare` readies a bucket ahead, and `screen(bucket, configs, only=GPUs)` takes the configs
in the order given (best guesses first: order.py) on every worker (or those of `only`) and:
1. every worker prepares the bucket (inputs, reference) at once, unless it has it prepared already;
2. the workers record what each config would compile (a share each), and every distinct specialization goes to
   the compile pool in config order, on all CPU cores but one per GPU;
3. one lane per worker takes the next config, waits for its compiles (a config that does not compile is failed
   there, with no GPU time; a kernel the compile process could not even import is left to the worker, noted
   once) and has its worker check and time it. A config slower than `cutoff` x the best time
   so far is cut after its first replay. A lost worker (crash, hang, stale) fails the config it was on (a stale
   one is given a second chance on the new worker: staleness may not be the config's doing) and is replaced.
Configs left when `budget_s` (or the absolute `deadline`) runs out are reported unscreened.

Pools of several ops (one per expert shape, say) may share one compile pool (`compiler`, closed by its owner), and
screens on disjoint GPUs may run at once from threads of their own (optimize/tuner/screen_schedule.py); `record`
and `submit` compile a bucket's configs ahead of its screen (a later bucket's, while the GPUs time another), at a
priority (compile_pool.py) that `screen` raises when the bucket's screen starts.
"""
from __future__ import annotations

import os
import threading
import time
from concurrent.futures import CancelledError, ThreadPoolExecutor
from pathlib import Path
from typing import Callable

from astra_sglang.optimize.tuner.compile_pool import CompilePool
from astra_sglang.optimize.tuner.screen_worker_handle import WorkerHandle, WorkerLost, WorkerSettings
from astra_sglang.triton.screen_records import Bucket, CompileJob, CompileOutcome, Screened, ScreenStats

CUTOFF = 1.5
"""A config whose first replay is this much slower than the best so far is not timed further: screening keeps
only the fast end, and one replay of a config 1.5x off the best is no contender (replays differ by a few %)."""
CONFIG_TIMEOUT_S = 60.0


class ScreenPool:
    def __init__(self, settings: WorkerSettings, gpus: list[str | None], cache_dir: str | Path,
                 compile_workers: int | None = None, config_timeout_s: float = CONFIG_TIMEOUT_S,
                 cutoff: float = CUTOFF, compiler: CompilePool | None = None):
        self.settings, self.config_timeout_s, self.cutoff = settings, config_timeout_s, cutoff
        os.environ["TRITON_CACHE_DIR"] = str(cache_dir)  # the workers inherit it: one cache for all
        cores = compile_workers or max(1, (os.cpu_count() or 2) - len(gpus))
        self._own_compiler = compiler is None  # a shared one (several ops' pools) is its owner's to close
        self.compiler = compiler or CompilePool(cores, cache_dir)
        self.workers: list[WorkerHandle] = []
        self.add(gpus)

    def add(self, gpus: list[str | None]) -> None:
        """Start a worker on each of `gpus` (at once); a pool lives across buckets and phases: a worker imports
        the op's code and builds its inputs once."""
        new = [WorkerHandle(gpu, self.settings) for gpu in gpus]
        self._each(lambda w: w.start(), new)
        self.workers += new

    def _each(self, fn: Callable[[WorkerHandle], object], workers: list[WorkerHandle] | None = None) -> list:
        workers = self.workers if workers is None else workers
        if not workers:
            return []
        with ThreadPoolExecutor(len(workers)) as ex:
            return list(ex.map(fn, workers))

    def prepare(self, bucket: Bucket, only: list[str | None] | None = None) -> list[str]:
        """Prepare `bucket` on the workers (of `only`'s GPUs) at once, ahead of `screen`; the names of those
        that could not."""
        run = _Run([], time.time(), float("inf"), None)
        workers = self._chosen(only)
        self._each(lambda w: self._prepare(w, bucket, run), workers)
        return run.notes

    def _chosen(self, only: list[str | None] | None) -> list[WorkerHandle]:
        return self.workers if only is None else [w for w in self.workers if w.gpu in only]

    # -- one bucket --------------------------------------------------------------------------------------
    def screen(self, bucket: Bucket, configs: list[str], budget_s: float | None = None,
               deadline: float | None = None, on_result: Callable[[Screened], None] | None = None,
               only: list[str | None] | None = None, found: dict[str, list[CompileJob]] | None = None,
               priority: tuple[int, int] = (0, 0)) -> tuple[list[Screened], ScreenStats]:
        """Screen `configs` at `bucket` on every worker, or on those of `only`'s GPUs (screens on disjoint GPUs may
        run at once, from threads of their own: they share the compile pool). `found`: the configs' compiles as
        `record` gave them ahead (recorded again only for configs it lacks); `priority`: see `submit`."""
        started = time.time()
        workers = self._chosen(only)
        stop_at = min(x for x in (deadline, started + budget_s if budget_s is not None else None, float("inf"))
                      if x is not None)
        restarts = sum(w.restarts for w in workers)
        c = self.compiler
        jobs, cached, seconds, failures = c.jobs, c.cached, c.seconds, c.failed
        run = _Run(configs, started, stop_at, on_result)
        ready = [w for w, ok in zip(workers, self._each(lambda w: self._prepare(w, bucket, run), workers)) if ok]
        if ready:
            recorded = dict(found or {})
            missing = [c for c in configs if c not in recorded]
            if missing:
                recorded.update(self._record(ready, missing))
            futures = self.submit(recorded, configs, priority)
            with ThreadPoolExecutor(len(ready)) as ex:
                list(ex.map(lambda w: self._lane(w, bucket, run, futures), ready))
            if self._own_compiler:  # configs the budget left: their compiles would hold up the next bucket
                self.compiler.cancel_pending()
        why = "; ".join(run.notes) or "the screening budget ran out first"
        results = [run.results.get(c) or Screened(config=c, bucket=bucket, stage="unscreened", reason=why[:300])
                   for c in configs]
        stats = ScreenStats.of(
            bucket, configs, results, gpus=[w.name for w in workers], wall_s=time.time() - started,
            compile_jobs=c.jobs - jobs, compile_cached=c.cached - cached, compile_s=c.seconds - seconds,
            compile_failed=c.failed - failures, notes=run.notes + run.compile_notes,
            restarts=sum(w.restarts for w in workers) - restarts)
        return results, stats

    def _prepare(self, worker: WorkerHandle, bucket: Bucket, run: "_Run") -> bool:
        """Prepare the bucket (a second try on a new worker); False: this worker sits the bucket out. A worker
        that has the bucket prepared already (an earlier phase, `prepare`) keeps its inputs."""
        if worker.bucket == bucket and worker.alive():
            return True
        for attempt in range(2):
            try:
                if attempt:
                    worker.bucket = None
                    worker.restart()
                worker.prepare(bucket)
                return True
            except WorkerLost as lost:
                reason = lost.reason
        run.note(f"{worker.name} could not prepare bucket {bucket}: {reason.splitlines()[0]}"[:300])
        return False

    def record(self, bucket: Bucket, configs: list[str], only: list[str | None] | None = None
               ) -> dict[str, list[CompileJob]]:
        """What each of `configs` would compile at `bucket` (recorded by the workers of `only`'s GPUs, prepared
        for it first), without screening: `submit` then compiles them ahead of a later `screen`."""
        run = _Run([], time.time(), float("inf"), None)
        workers = self._chosen(only)
        ready = [w for w, ok in zip(workers, self._each(lambda w: self._prepare(w, bucket, run), workers)) if ok]
        return self._record(ready, configs) if ready else {}

    def submit(self, found: dict[str, list[CompileJob]], configs: list[str], priority: tuple[int, int] = (0, 0)
               ) -> dict[str, list]:
        """config -> the futures of its compiles, each at priority (wave, its index in `configs`, rank) for
        `priority` (wave, rank): a wave's screens are served config by config, the earlier waves first (a
        specialization submitted before, by this pool or another sharing the compile pool, keeps its one future,
        moved up where this priority is the smaller)."""
        wave, rank = priority
        return {c: [self.compiler.submit(j, (wave, i, rank)) for j in found.get(c, [])]
                for i, c in enumerate(configs)}

    def _record(self, workers: list[WorkerHandle], configs: list[str]) -> dict[str, list[CompileJob]]:
        """config -> its compile jobs, the configs shared out over the workers."""
        share = -(-len(configs) // len(workers))
        chunks = [configs[i * share:(i + 1) * share] for i in range(len(workers))]

        def record(pair) -> dict[str, list[CompileJob]]:
            worker, chunk = pair
            if not chunk:
                return {}
            try:
                return worker.ask(("jobs", chunk), self.settings.jobs_timeout_s)[1]
            except WorkerLost:
                try:
                    worker.restart()
                except WorkerLost:
                    pass  # its lane finds out and ends
                return {}  # not compiled ahead: the worker compiles them itself

        with ThreadPoolExecutor(len(workers)) as ex:
            found: dict[str, list[CompileJob]] = {}
            for part in ex.map(record, zip(workers, chunks)):
                found.update(part)
        return found

    def _lane(self, worker: WorkerHandle, bucket: Bucket, run: "_Run", futures: dict[str, list]) -> None:
        while (config := run.take()) is not None:
            outcomes = [_outcome(f) for f in futures.get(config, [])]
            bad = next((o for o in outcomes if not o.ok and o.ahead), None)
            for o in outcomes:
                if not o.ahead:  # the worker compiles this one itself
                    run.note_once(f"not compiled ahead (the worker compiles): {o.reason}"[:300])
            if bad is not None:
                run.record(Screened(config=config, bucket=bucket, stage="compile", reason=bad.reason,
                                    worker="compile"))
                continue
            try:
                result = worker.ask(("screen", config, run.cutoff(self.cutoff)), self.config_timeout_s)[1]
            except WorkerLost as lost:
                result = Screened(config=config, bucket=bucket, stage=lost.stage, reason=lost.reason[:300],
                                  worker=worker.name)
            if result.stage in ("crash", "hang", "stale"):
                if not self._replace(worker, run):
                    run.record(result)
                    return
                if result.stage == "stale" and run.retry(config):
                    continue
            run.record(result)

    def _replace(self, worker: WorkerHandle, run: "_Run") -> bool:
        try:
            worker.restart()
            return True
        except WorkerLost as lost:  # the GPU is gone for good: this lane ends, the others go on
            run.note(f"{worker.name} could not be restarted: {lost.reason}")
            return False

    def close(self) -> None:
        self._each(lambda w: w.stop())
        if self._own_compiler:
            self.compiler.close()

    def __enter__(self) -> "ScreenPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _outcome(future) -> CompileOutcome:
    """A compile's outcome; one cancelled meanwhile (another screen sharing the pool was cut) is the worker's to
    compile."""
    try:
        return future.result()
    except CancelledError:
        return CompileOutcome(ok=False, ahead=False, reason="its compile ahead was cancelled")


class _Run:
    """The shared state of one bucket's lanes: the next config, the best time so far, the results."""

    def __init__(self, configs: list[str], started: float, stop_at: float, on_result):
        self.configs, self.started, self.stop_at, self.on_result = configs, started, stop_at, on_result
        self.lock = threading.Lock()
        self.next = 0
        self.retries: list[str] = []
        self.retried: set[str] = set()
        self.results: dict[str, Screened] = {}
        self.best_us: float | None = None
        self.notes: list[str] = []
        self.compile_notes: list[str] = []

    def take(self) -> str | None:
        with self.lock:
            if time.time() >= self.stop_at:
                return None
            if self.retries:
                return self.retries.pop(0)
            if self.next >= len(self.configs):
                return None
            self.next += 1
            return self.configs[self.next - 1]

    def retry(self, config: str) -> bool:
        with self.lock:
            if config in self.retried:
                return False
            self.retried.add(config)
            self.retries.append(config)
            return True

    def cutoff(self, factor: float) -> float | None:
        with self.lock:
            return self.best_us * factor if self.best_us else None

    def record(self, result: Screened) -> None:
        result = result.model_copy(update={"at_s": time.time() - self.started})
        with self.lock:
            self.results[result.config] = result
            if result.stage == "done" and (self.best_us is None or result.us < self.best_us):
                self.best_us = result.us
        if self.on_result:
            self.on_result(result)

    def note(self, text: str) -> None:
        with self.lock:
            self.notes.append(text)

    def note_once(self, text: str) -> None:
        """A note on the compiles (the same reason once), kept apart from why configs went unscreened."""
        with self.lock:
            if text not in self.compile_notes:
                self.compile_notes.append(text)
