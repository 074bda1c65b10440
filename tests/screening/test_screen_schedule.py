"""The screening schedule's compiles on CPU: the unit a GPU screens next gets its compiles first, and a unit is
started only once its first configs are compiled. Two simulated ops (expert shapes) share one compile process and
one GPU; each batch size compiles its own kernels, as fused MoE's did on an H200 (moe_costs.RUN_B)."""
from __future__ import annotations

import json
import threading
import time
from concurrent.futures import Future

from astra_sglang.optimize.tuner.compile_pool import CompilePool
from astra_sglang.optimize.tuner.screen_pool import ScreenPool
from astra_sglang.optimize.tuner.screen_schedule import Schedule, ScreenUnit
from astra_sglang.optimize.tuner.screen_worker_handle import WorkerSettings
from astra_sglang.triton.screen_records import Screened, ScreenStats

TARGET = "astra_sglang.optimize.tuner.screen_simulate:SimulatedLaunch"


def _settings() -> WorkerSettings:
    return WorkerSettings(target=TARGET, options={"compile_s": 0.05, "call_s": 0.001, "per_bucket": True},
                          beat_s=0.1, start_timeout_s=60)


def test_a_unit_started_after_others_were_queued_gets_its_compiles_first(tmp_path):
    """RUN_B's failure: mixtral@16 was not queued ahead (the plan took it to share mixtral@64's kernels); started
    next on the GPU, its compiles went behind every compile queued for Qwen3's units, screened later, and its
    second config waited 61 s. Its compiles must overtake those."""
    units = [ScreenUnit(f"{op}@{b}", op, b, [f"{op}{i:02d}" for i in range(10)]) for op in "ab" for b in (64, 16)]
    ended: dict[str, list[float]] = {}
    lock = threading.Lock()
    with CompilePool(1, tmp_path / "cache") as compiler:
        submit = compiler.submit

        seen: set[int] = set()

        def watched(job, priority=()):
            future = submit(job, priority)
            spec = json.loads(job.data)  # the simulated job: its config (named after its op) and bucket
            if id(future) not in seen:  # submitted again when its unit starts: the same future, timed once
                seen.add(id(future))
                future.add_done_callback(lambda _, name=f"{spec['config'][0]}@{spec['bucket']}": _end(name))
            return future

        def _end(name):
            with lock:
                ended.setdefault(name, []).append(time.monotonic())

        compiler.submit = watched
        pools = {op: ScreenPool(_settings(), [None], tmp_path / "cache", compiler=compiler) for op in "ab"}
        try:
            schedule = Schedule(pools, [None], echo=lambda _: None)
            schedule.prefetch([units[0], units[2], units[3]])  # a@16 left out, as RUN_B's plan left mixtral@16
            done = schedule.run(units)
        finally:
            for pool in pools.values():
                pool.close()
    assert all(r.stats.screened == 10 for r in done.values())
    # first in, first out, a@16 (recorded when it starts) would compile after all of b@64's and b@16's
    assert max(ended["a@16"]) < max(ended["b@64"]) < max(ended["b@16"])
    assert [r.unit.name for r in sorted(done.values(), key=lambda r: r.start_s)] == ["a@64", "a@16", "b@64", "b@16"]


class GatedPool:
    """A pool whose compiles the test finishes by hand: `record` gives one job a config, `submit` hands out the
    test's futures; `screen` answers at once."""

    def __init__(self, futures: dict[str, Future]):
        self.futures, self.calls = futures, []

    def record(self, bucket, configs, only=None):
        return {c: [c] for c in configs}

    def submit(self, found, configs, priority=(0, 0)):
        return {c: [self.futures[c]] for c in configs}

    def screen(self, bucket, configs, deadline=None, on_result=None, only=None, found=None, priority=(0, 0)):
        self.calls.append(bucket)
        results = [Screened(config=c, bucket=bucket, stage="done", us=1.0) for c in configs]
        return results, ScreenStats.of(bucket, configs, results, gpus=list(only), wall_s=0.0)


def test_a_gpu_takes_the_first_unit_whose_compiles_are_ahead():
    futures = {c: Future() for c in ("x0", "x1", "x2", "y0", "y1")}
    for c in ("y0", "y1"):
        futures[c].set_result(None)
    pool = GatedPool(futures)
    units = [ScreenUnit("op@1", "op", 1, ["x0", "x1", "x2"], lead=2), ScreenUnit("op@2", "op", 2, ["y0", "y1"], lead=1)]
    schedule = Schedule({"op": pool}, ["0"], echo=lambda _: None)
    schedule.prefetch(units)
    runner = threading.Thread(target=schedule.run, args=(units,))
    runner.start()
    for _ in range(100):
        if pool.calls:
            break
        time.sleep(0.05)
    time.sleep(0.5)  # several looks at op@1: still not ready
    assert pool.calls == [2]
    futures["x0"].set_result(None)
    time.sleep(0.5)
    assert pool.calls == [2]  # one of its two first configs compiled: not yet
    futures["x1"].set_result(None)
    runner.join(timeout=30)
    assert pool.calls == [2, 1] and set(schedule.done) == {"op@1", "op@2"}
