"""The evaluation pool: candidates in flight on every GPU of a host, or on a Ray cluster.

- devices.py: the host's GPUs and the facts a planner is given about them
- pool.py: LocalPool, builds on the CPU cores overlapping one evaluation worker per GPU
- ray_pool.py: RayPool, the same interface over Ray tasks (optional extra `ray`)
- stats.py: spans of builds and evaluations, throughput figures
- simulate.py: simulated builds and evaluations for machines without a GPU
"""
from astra_sglang.optimize.pool.pool import LocalPool

__all__ = ["LocalPool", "make_pool"]


def make_pool(ray: str | None = None, gpus: list[str] | None = None, evaluator=None, builder=None):
    """The pool a run uses: Ray tasks when `ray` names a cluster ("auto", an address, or "local"), else
    this host's GPUs."""
    if ray:
        from astra_sglang.optimize.pool.ray_pool import RayPool

        return RayPool(ray, evaluator=evaluator, builder=builder)
    return LocalPool(gpus=gpus, evaluator=evaluator, builder=builder)
