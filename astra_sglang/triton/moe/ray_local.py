"""The part of Ray's API that SGLang's fused MoE tuner calls, served in this process: it runs that script unchanged
where Ray cannot be installed (the GPU machines here: Ray's wheel alone is larger than what they can be given).

The tuner decorates a worker class with `@ray.remote(num_gpus=1)`, makes one per GPU Ray reports, calls
`worker.method.remote(...)` and `ray.get`s the results; its config loop iterates `ray.experimental.tqdm_ray.tqdm`.
Here `remote` makes a local object whose calls run at once (a process per GPU is the caller's business: this
reports one GPU), and `tqdm` yields the configs while logging when each one started (per-config cost) and
stops yielding at a deadline, so that a bounded run ends inside SGLang's own loop, which then returns the best
config it measured. Environment: ASTRA_RAY_LOG (a JSON-lines file: one {"i", "t"} per config started, and a
last {"end"}), ASTRA_RAY_DEADLINE (epoch seconds). `sglang_tuner.shim_dir` puts a `ray` package that re-exports
this module first on the tuner's path.
"""
from __future__ import annotations

import json
import os
import time
from typing import Any, Iterable


class ObjectRef:
    def __init__(self, value: Any):
        self.value = value


class _Method:
    def __init__(self, bound):
        self._bound = bound

    def remote(self, *args, **kwargs) -> ObjectRef:
        return ObjectRef(self._bound(*args, **kwargs))

    def __call__(self, *args, **kwargs):
        return self._bound(*args, **kwargs)


class ActorHandle:
    def __init__(self, instance):
        self._instance = instance

    def __getattr__(self, name: str):
        attr = getattr(self._instance, name)
        return _Method(attr) if callable(attr) else attr


class ActorClass:
    """`@ray.remote(...)` on a class: `.remote(*args)` builds it here; `.cls` is the class itself."""

    def __init__(self, cls):
        self.cls = cls

    def remote(self, *args, **kwargs) -> ActorHandle:
        return ActorHandle(self.cls(*args, **kwargs))


def remote(*args, **options):
    """`@ray.remote` and `@ray.remote(num_gpus=1)` on a class or a function."""
    def wrap(target):
        return ActorClass(target) if isinstance(target, type) else _Method(target)
    if len(args) == 1 and callable(args[0]) and not options:
        return wrap(args[0])
    return wrap


def get(refs):
    if isinstance(refs, list):
        return [get(r) for r in refs]
    return refs.value if isinstance(refs, ObjectRef) else refs


def init(*args, **kwargs) -> None:
    return None


def shutdown() -> None:
    return None


def is_initialized() -> bool:
    return True


def available_resources() -> dict[str, float]:
    return {"GPU": 1.0, "CPU": float(os.cpu_count() or 1)}


def cluster_resources() -> dict[str, float]:
    return available_resources()


def get_gpu_ids() -> list[int]:
    return [0]


def tqdm(iterable: Iterable, *args, **kwargs):
    """The configs one by one, each start logged; none after the deadline."""
    log = os.environ.get("ASTRA_RAY_LOG")
    deadline = float(os.environ.get("ASTRA_RAY_DEADLINE") or "inf")
    handle = open(log, "a") if log else None
    try:
        for i, item in enumerate(iterable):
            now = time.time()
            if now >= deadline:
                break
            if handle:
                handle.write(json.dumps({"i": i, "t": now}) + "\n")
                handle.flush()
            yield item
    finally:
        if handle:
            handle.write(json.dumps({"end": time.time()}) + "\n")
            handle.close()
