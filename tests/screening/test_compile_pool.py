"""The compile pool's queue on CPU, with simulated compiles (a sleep and a marker in the cache dir): the most urgent
job first, a job submitted again with a smaller priority moves up, a specialization compiles once, what waits can
be cancelled (and compiles anew when submitted again), and closing with jobs waiting leaves no one blocked."""
from __future__ import annotations

import json
import threading
import time

import pytest

from astra_sglang.optimize.tuner.compile_pool import CompilePool
from astra_sglang.triton.screen_records import CompileJob

SECONDS = 0.15


def _job(name: str, seconds: float = SECONDS) -> CompileJob:
    return CompileJob(kind="simulated", module="simulated", qualname=name, target=("simulated", 0, 0),
                      data=json.dumps({"config": name, "seconds": seconds, "fail": ""}))


class _Order:
    """Names in the order their compiles end."""

    def __init__(self):
        self.names, self.lock = [], threading.Lock()

    def watch(self, name: str, future) -> None:
        def done(_):
            with self.lock:
                self.names.append(name)
        future.add_done_callback(done)


def test_the_most_urgent_job_goes_first_and_one_submitted_again_moves_up(tmp_path):
    order = _Order()
    with CompilePool(1, tmp_path / "cache") as pool:
        pool.submit(_job("warm", 0.0)).result(timeout=60)  # the process is up: what follows queues behind one job
        first = pool.submit(_job("first"), (5,))  # handed to the process at once
        order.watch("first", first)
        for name, priority in [("late", (5,)), ("urgent", (1,)), ("moved", (9,))]:
            order.watch(name, pool.submit(_job(name), priority))
        again = pool.submit(_job("moved"), (0,))  # the same specialization, now the most urgent: one future
        outcomes = [f.result(timeout=60) for f in (first, again)]
        pool.submit(_job("late"), (5,)).result(timeout=60)
    assert all(o.ok for o in outcomes)
    # a first-in-first-out queue would end them first, late, urgent, moved
    assert order.names == ["first", "moved", "urgent", "late"]
    assert pool.submitted == 5  # warm, first, late, urgent, moved: each once


@pytest.mark.parametrize("workers", [1, 2])
def test_waiting_jobs_cancel_and_compile_anew_when_submitted_again(tmp_path, workers):
    with CompilePool(workers, tmp_path / "cache") as pool:
        for f in [pool.submit(_job(f"warm{i}", 0.0)) for i in range(workers)]:
            f.result(timeout=60)
        running = [pool.submit(_job(f"run{i}", 0.5)) for i in range(workers)]
        waiting = [pool.submit(_job(f"wait{i}")) for i in range(3)]
        time.sleep(0.1)  # the processes have taken the running ones
        assert pool.cancel_pending() == 3
        assert all(f.cancelled() for f in waiting)
        assert all(f.result(timeout=60).ok for f in running)  # those handed out run to the end
        again = pool.submit(_job("wait0"))
        assert again is not waiting[0] and again.result(timeout=60).ok


def test_closing_with_jobs_waiting_leaves_none_blocked(tmp_path):
    pool = CompilePool(1, tmp_path / "cache")
    futures = [pool.submit(_job(f"j{i}", 0.3), (i,)) for i in range(4)]
    pool.close()
    assert all(f.done() for f in futures)
    assert all(f.cancelled() for f in futures[1:])  # the first ran, or was cancelled before its process took it
