"""Screening past one host on a local Ray cluster that declares two GPUs, split into two one-GPU actors (standing
in for two hosts): each actor runs its own ScreenPool; the configs are dealt round-robin and come back whole, in
order, a crash on one host failing only its config."""
from __future__ import annotations

import pytest

from astra_sglang.optimize.tuner.screen_worker_handle import WorkerSettings

ray = pytest.importorskip("ray")


def test_two_hosts_screen_one_bucket(tmp_path):
    from astra_sglang.optimize.tuner.screen_ray import RayScreener

    settings = WorkerSettings(target="astra_sglang.optimize.tuner.screen_simulate:SimulatedLaunch",
                              options={"faults": {"c05": "segv", "c08": "wrong"}, "compile_s": 0.01, "call_s": 0.002},
                              beat_s=0.1, stale_s=5.0, start_timeout_s=120)
    configs = [f"c{i:02d}" for i in range(12)]
    with RayScreener("local", settings, tmp_path / "cache", gpus_per_host=1, compile_workers=1,
                     config_timeout_s=10, init=dict(num_cpus=2, num_gpus=2)) as screener:
        assert len(screener.actors) == 2
        seen = []
        results, stats = screener.screen(64, configs, on_result=seen.append)
    assert [r.config for r in results] == configs and len(seen) == 12
    by = {r.config: r for r in results}
    assert by["c05"].stage == "crash" and by["c08"].stage == "check"
    assert sorted(stats.gpus) == ["gpu0", "gpu1"] and stats.restarts == 1
    assert {r.worker for r in results if r.ok} == {"gpu0", "gpu1"}  # both hosts screened
    assert stats.compile_jobs == 24 and stats.hits > 0
