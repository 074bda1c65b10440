"""The screening worker's lifecycle on CPU, with the simulated launch standing in for a GPU: configs that crash
the worker, hang, freeze it, fail to compile or give wrong results fail alone; the worker is replaced and the
others are timed; compiles ahead are found by the worker (hits); the budget leaves configs unscreened."""
from __future__ import annotations

from astra_sglang.optimize.tuner.screen_pool import ScreenPool
from astra_sglang.optimize.tuner.screen_worker_handle import WorkerSettings

TARGET = "astra_sglang.optimize.tuner.screen_simulate:SimulatedLaunch"
FAULTS = {"c03": "segv", "c05": "illegal", "c07": "hang", "c09": "compile", "c11": "wrong", "c13": "oom",
          "c15": "raise"}
EXPECTED = {"c03": "crash", "c05": "crash", "c07": "hang", "c09": "compile", "c11": "check", "c13": "load",
            "c15": "launch"}


def _pool(tmp_path, faults, gpus=(None,), **kw):
    settings = WorkerSettings(target=TARGET, options={"faults": faults, "compile_s": 0.01, "call_s": 0.002},
                              beat_s=0.1, stale_s=kw.pop("stale_s", 2.0), start_timeout_s=60)
    return ScreenPool(settings, list(gpus), tmp_path / "triton-cache", compile_workers=2,
                      config_timeout_s=kw.pop("config_timeout_s", 3.0), **kw)


def test_every_fault_fails_its_config_alone(tmp_path):
    configs = [f"c{i:02d}" for i in range(18)]
    seen = []
    with _pool(tmp_path, FAULTS) as pool:
        results, stats = pool.screen(16, configs, on_result=seen.append)
    by = {r.config: r for r in results}
    for config, stage in EXPECTED.items():
        assert by[config].stage == stage, (config, by[config])
        assert by[config].reason
    good = [c for c in configs if c not in FAULTS]
    assert all(by[c].stage in ("done", "slow") for c in good)
    assert all(by[c].us > 0 for c in good)
    assert stats.restarts == 3  # segv, illegal address, hang
    assert stats.failed == {s: list(EXPECTED.values()).count(s) for s in set(EXPECTED.values())}
    assert stats.best == min((r for r in results if r.stage == "done"), key=lambda r: r.us).config
    assert len(seen) == len(configs)
    assert "killed by SIGSEGV" in by["c03"].reason and "illegal memory access" in by["c05"].reason
    assert by["c09"].worker == "compile"  # failed in the compile pool: never sent to the GPU


def test_compiled_ahead_configs_only_load(tmp_path):
    configs = [f"c{i:02d}" for i in range(8)]
    with _pool(tmp_path, {}) as pool:
        results, stats = pool.screen(1, configs)
        assert stats.compile_jobs == 16 and stats.hits == 16 and stats.misses == 0 and stats.hit_rate == 1.0
        _, again = pool.screen(2, configs)  # loaded in the worker already: nothing to compile or load
    assert again.compile_jobs == 0 and again.hits == again.misses == 0


def test_a_stale_worker_is_replaced_and_its_config_retried_once(tmp_path):
    configs = ["a", "stale", "b"]
    with _pool(tmp_path, {"stale": "stale"}, stale_s=1.0, config_timeout_s=30) as pool:
        results, stats = pool.screen(4, configs)
    by = {r.config: r for r in results}
    assert by["stale"].stage == "stale" and "stopped beating" in by["stale"].reason
    assert by["a"].ok and by["b"].stage in ("done", "slow")
    assert stats.restarts == 2  # the first freeze, then the retry's


def test_the_budget_leaves_configs_unscreened(tmp_path):
    configs = [f"c{i:04d}" for i in range(3000)]
    with _pool(tmp_path, {}) as pool:
        results, stats = pool.screen(8, configs, budget_s=2.0)
    assert 0 < stats.screened < len(configs)
    assert {r.stage for r in results[stats.screened:]} == {"unscreened"}


def test_two_workers_share_the_configs(tmp_path):
    configs = [f"c{i:02d}" for i in range(20)]
    with _pool(tmp_path, {"c04": "segv"}, gpus=("0", "1")) as pool:
        results, stats = pool.screen(32, configs)
    assert {r.worker for r in results if r.ok} == {"gpu0", "gpu1"}
    assert stats.gpus == ["gpu0", "gpu1"] and stats.restarts == 1
    assert sum(r.stage == "crash" for r in results) == 1


def test_a_pool_lives_across_phases(tmp_path):
    """Workers start once; a prepared bucket is kept (no second prepare, no restart), a phase can take a subset of
    the GPUs and a worker added later prepares on its own; the rates count timed configs only."""
    configs = [f"c{i:02d}" for i in range(12)]
    with _pool(tmp_path, {"c01": "compile", "c02": "wrong"}, gpus=("0", "1")) as pool:
        assert pool.prepare(64) == []
        pids = [w.proc.pid for w in pool.workers]
        _, one = pool.screen(64, configs, only=["0"])
        _, both = pool.screen(64, configs)
        assert [w.proc.pid for w in pool.workers] == pids and one.gpus == ["gpu0"] and both.gpus == ["gpu0", "gpu1"]
        pool.add(["2"])
        _, third = pool.screen(64, configs[:4], only=["2"])
        assert third.gpus == ["gpu2"] and third.screened == 4
    assert one.timed == one.screened - 2 and one.per_second == one.timed / one.wall_s
    assert one.reasons["compile"] == ["CompilationError: simulated"] and "wrong results" in one.reasons["check"][0]
    assert one.failing_stage() is None and one.failed == {"compile": 1, "check": 1}
