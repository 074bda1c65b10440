"""Past one host: candidate builds and GPU evaluations as Ray tasks, with LocalPool's interface.

An evaluation is a task with num_gpus=1, so Ray never runs two on one GPU and sets CUDA_VISIBLE_DEVICES,
which the harness's evaluation child inherits. A build is a task with one CPU on any node; its evaluation
prefers the same node (soft node affinity), whose build cache then holds the library. Sources travel with
the task (nodes need not share the driver's filesystem); every node needs astra-sglang installed (the
same version) and, for builds, nvcc. Results come back to the driver, which writes them to the run
directory exactly as a local run does.
"""
from __future__ import annotations

import tempfile
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from astra_sglang.errors import AstraError
from astra_sglang.harness.records import BuildInfo, EvalRequest, EvalResult, KernelSource
from astra_sglang.optimize.pool.devices import GpuFacts, probe
from astra_sglang.optimize.pool.pool import Builder, Evaluator, build_failure, harness_build, harness_evaluate
from astra_sglang.optimize.pool.stats import PoolStats, Span

Texts = tuple[str | None, str | None]
"""The candidate's and the baseline's source text (None: a py: baseline or the harness's default)."""


def _texts(req: EvalRequest) -> Texts:
    def text(source: KernelSource | None) -> str | None:
        if source is None or source.is_python:
            return None
        path = Path(source.path)
        return path.read_text() if path.is_file() else None

    return text(req.candidate), text(req.baseline)


def _here(req: EvalRequest, texts: Texts, folder: str) -> EvalRequest:
    """The request with its sources written into `folder` on this node (labels keep the original names)."""
    def place(source: KernelSource | None, text: str | None, name: str) -> KernelSource | None:
        if source is None or text is None:
            return source
        path = Path(folder) / name
        path.write_text(text)
        return source.model_copy(update={"path": str(path), "label": source.name()})

    return req.model_copy(update={"candidate": place(req.candidate, texts[0], "candidate.cu"),
                                  "baseline": place(req.baseline, texts[1], "baseline.cu")})


def _node() -> str:
    import ray

    return ray.get_runtime_context().get_node_id()


def build_task(req: EvalRequest, texts: Texts, builder: Builder) -> tuple[str, BuildInfo, float, float]:
    start = time.time()
    with tempfile.TemporaryDirectory(prefix="astra-ray-") as tmp:
        local = _here(req, texts, tmp)
        info = builder(local.candidate.path, local.candidate.defines, local.arch) if texts[0] is not None \
            else BuildInfo(ok=True)
        if info.ok and texts[1] is not None:
            builder(local.baseline.path, local.baseline.defines, local.arch)
    return _node(), info, start, time.time()


def eval_task(req: EvalRequest, texts: Texts, evaluator: Evaluator) -> tuple[str, EvalResult, float, float]:
    import os

    start = time.time()
    with tempfile.TemporaryDirectory(prefix="astra-ray-") as tmp:
        result = evaluator(_here(req, texts, tmp))
    lane = f"{_node()[:8]}:{os.environ.get('CUDA_VISIBLE_DEVICES', '-')}"
    return lane, result, start, time.time()


def probe_task() -> GpuFacts:
    return probe()


class RayPool:
    """Ray tasks for builds and evaluations. `address`: "auto" (the cluster this machine belongs to), an
    address such as ray://head:10001, or "local" (start a one-machine cluster, as the tests do)."""

    def __init__(self, address: str, evaluator: Evaluator | None = None, builder: Builder | None = None,
                 init: dict | None = None, waiters: int = 64):
        try:
            import ray
        except ImportError:
            raise AstraError("--ray needs Ray: pip install 'astra-sglang[ray]'") from None
        self._ray, self._owned = ray, not ray.is_initialized()
        if self._owned:
            ray.init(address=None if address == "local" else address, include_dashboard=False, log_to_driver=False,
                     **(init or {}))
        if evaluator is None:
            evaluator, builder = harness_evaluate, builder or harness_build
        self.evaluator, self.builder = evaluator, builder  # no builder: the evaluation builds (LocalPool's rule)
        self._build = ray.remote(num_cpus=1)(build_task)
        self._eval = ray.remote(num_cpus=0, num_gpus=1)(eval_task)
        self._waiters = ThreadPoolExecutor(max_workers=waiters, thread_name_prefix="astra-ray")
        self.gpus = int(ray.cluster_resources().get("GPU", 0))
        if self.gpus == 0:
            raise AstraError(f"the Ray cluster at {address} has no GPU resources: evaluations need num_gpus=1")
        self._stats = PoolStats(lanes=[], gpus=self.gpus)
        self._facts: GpuFacts | None = None

    def submit(self, req: EvalRequest) -> Future:
        return self._waiters.submit(self._run, req)

    def map(self, reqs: list[EvalRequest]) -> list[EvalResult]:
        return [f.result() for f in [self.submit(r) for r in reqs]]

    def exclusive(self, fn, *args) -> Future:
        """fn(*args) as a task holding one GPU (a profiler run); it sees that node's files only."""
        task = self._ray.remote(num_gpus=1, num_cpus=0)(fn)
        return self._waiters.submit(lambda: self._ray.get(task.remote(*args)))

    def stats(self) -> PoolStats:
        return self._stats.model_copy(deep=True)

    def gpu_facts(self) -> GpuFacts:
        if self._facts is None:
            self._facts = self._ray.get(self._ray.remote(num_gpus=1, num_cpus=0)(probe_task).remote())
        return self._facts

    def _run(self, req: EvalRequest) -> EvalResult:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        texts = _texts(req)
        task = self._eval
        if self.builder is not None:
            node, info, start, end = self._ray.get(self._build.remote(req, texts, self.builder))
            self._stats.builds.append(Span(lane="cpu", start=start, end=end, cached=info.cached))
            if not info.ok:
                return build_failure(req, info)
            task = self._eval.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=True))
        if req.compile_only:  # no GPU needed: a CPU slot anywhere
            task = self._ray.remote(num_cpus=1)(eval_task)
        lane, result, start, end = self._ray.get(task.remote(req, texts, self.evaluator))
        if not req.compile_only:
            self._stats.evaluations.append(Span(lane=lane, start=start, end=end))
            if lane not in self._stats.lanes:
                self._stats.lanes.append(lane)
        return result

    def close(self) -> None:
        self._waiters.shutdown(wait=True)
        if self._owned:
            self._ray.shutdown()

    def __enter__(self) -> "RayPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
