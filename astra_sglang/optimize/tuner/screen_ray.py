"""Screening past one host: a Ray actor per host holds that host's ScreenPool (a worker per GPU, the compile
pool on its cores, its own Triton cache), and each bucket's ordered configs are dealt out round-robin, so every
host screens the best guesses first. The actors come from Ray's actor API (one per GPU node, holding all its
GPUs); nothing is scheduled here beyond that deal.

`gpus_per_host` splits one machine's GPUs into several actors (a local cluster that declares GPUs stands in for
several hosts in the tests). Every node needs astra-sglang installed (the same version) and the op's code.
"""
from __future__ import annotations

import time
from pathlib import Path

from astra_sglang.errors import AstraError
from astra_sglang.optimize.tuner.screen_worker_handle import WorkerSettings
from astra_sglang.triton.screen_records import Screened, ScreenStats


class HostScreener:
    """The actor's class (made remote by RayScreener): one host's ScreenPool over the GPUs Ray gave it."""

    def __init__(self, settings: WorkerSettings, cache_dir: str, compile_workers: int | None,
                 config_timeout_s: float):
        import ray

        from astra_sglang.optimize.tuner.screen_pool import ScreenPool

        gpus = [str(int(g)) for g in ray.get_gpu_ids()]
        self.pool = ScreenPool(settings, gpus, cache_dir, compile_workers, config_timeout_s)

    def screen(self, bucket, configs: list[str], budget_s: float | None, deadline: float | None):
        return self.pool.screen(bucket, configs, budget_s=budget_s, deadline=deadline)

    def close(self) -> None:
        self.pool.close()


def merge(bucket, configs: list[str], parts: list[tuple[list[Screened], ScreenStats]], wall_s: float
          ) -> tuple[list[Screened], ScreenStats]:
    by = {r.config: r for results, _ in parts for r in results}
    results = [by[c] for c in configs]
    stats = [s for _, s in parts]
    return results, ScreenStats.of(
        bucket, configs, results, gpus=[g for s in stats for g in s.gpus], wall_s=wall_s,
        compile_jobs=sum(s.compile_jobs for s in stats), compile_cached=sum(s.compile_cached for s in stats),
        compile_s=sum(s.compile_s for s in stats),
        compile_failed=sum(s.compile_failed for s in stats), restarts=sum(s.restarts for s in stats),
        notes=[n for s in stats for n in s.notes])


class RayScreener:
    def __init__(self, address: str, settings: WorkerSettings, cache_dir: str | Path,
                 gpus_per_host: int | None = None, compile_workers: int | None = None,
                 config_timeout_s: float = 60.0, init: dict | None = None):
        try:
            import ray
        except ImportError:
            raise AstraError("--ray needs Ray: pip install 'astra-sglang[ray]'") from None
        self._ray, self._owned = ray, not ray.is_initialized()
        if self._owned:
            ray.init(address=None if address == "local" else address, include_dashboard=False, log_to_driver=False,
                     **(init or {}))
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        actor = ray.remote(HostScreener)
        self.actors = []
        for node in ray.nodes():
            gpus = int(node.get("Resources", {}).get("GPU", 0)) if node.get("Alive") else 0
            per = gpus_per_host or gpus
            for _ in range(gpus // per if per else 0):
                self.actors.append(actor.options(num_gpus=per, num_cpus=0, scheduling_strategy=(
                    NodeAffinitySchedulingStrategy(node["NodeID"], soft=False))).remote(
                        settings, str(cache_dir), compile_workers, config_timeout_s))
        if not self.actors:
            self.close()
            raise AstraError(f"the Ray cluster at {address} has no GPU node: screening needs GPUs")

    def screen(self, bucket, configs: list[str], budget_s: float | None = None, deadline: float | None = None,
               on_result=None) -> tuple[list[Screened], ScreenStats]:
        started = time.time()
        shards = [configs[i::len(self.actors)] for i in range(len(self.actors))]
        parts = self._ray.get([a.screen.remote(bucket, shard, budget_s, deadline)
                               for a, shard in zip(self.actors, shards)])
        results, stats = merge(bucket, configs, parts, time.time() - started)
        for r in results if on_result else ():
            on_result(r)
        return results, stats

    def close(self) -> None:
        for a in getattr(self, "actors", []):
            try:
                self._ray.get(a.close.remote(), timeout=60)
            except Exception:  # noqa: BLE001 - a lost actor has nothing left to close
                pass
        if self._owned:
            self._ray.shutdown()

    def __enter__(self) -> "RayScreener":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
