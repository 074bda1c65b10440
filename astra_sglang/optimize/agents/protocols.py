"""What the agent loop talks to, as Protocols: a chat model, an evaluator or a pool of them, a profiler.

Anything with these shapes plugs in: the OpenAI-compatible client or a ScriptedModel; a LocalPool or a
RayPool (astra_sglang.optimize.pool), or a bare evaluator (the harness's isolated `evaluate`, a stand-in in
tests), which the loop runs one at a time; Nsight Compute or nothing.
"""
from __future__ import annotations

from concurrent.futures import Future
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from astra_sglang.harness.ncu import ProfileFacts
from astra_sglang.harness.records import EvalRequest, EvalResult
from astra_sglang.optimize.agents.meter import UsageMeter
from astra_sglang.optimize.records import Message, Reply

if TYPE_CHECKING:
    from astra_sglang.optimize.pool.devices import GpuFacts
    from astra_sglang.optimize.pool.stats import PoolStats


@runtime_checkable
class Model(Protocol):
    """A chat model that counts what it spends (and raises BudgetExceeded past the run's limits)."""

    name: str
    meter: UsageMeter
    """Spending so far (a resumed run seeds it from the log) and the run's limits."""

    def complete(self, messages: list[Message], tag: str = "") -> Reply:
        """One answer; retries transient failures itself, raises LLMError when it gives up. `tag` names the
        step in the call's cost line."""
        ...

    def sample(self, messages: list[Message], n: int, tag: str = "") -> list[Reply]:
        """n independent answers to the same prompt (one request with `n` where the endpoint supports it)."""
        ...


class Evaluator(Protocol):
    """Build + check + time one candidate (astra_sglang.harness.isolate.evaluate has this shape)."""

    def __call__(self, req: EvalRequest) -> EvalResult: ...


class Pool(Protocol):
    """Candidates in flight: builds on CPU cores overlap evaluations, one at a time per GPU
    (astra_sglang.optimize.pool: a local pool, or Ray tasks)."""

    gpus: list[str] | int
    """The GPUs evaluations run on: their ids (a local pool) or their count (a Ray cluster)."""

    def submit(self, req: EvalRequest) -> Future[EvalResult]: ...

    def map(self, reqs: list[EvalRequest]) -> list[EvalResult]: ...

    def exclusive(self, fn, *args) -> Future:
        """fn(*args) alone on a GPU, as an evaluation would be (a profiler run)."""
        ...

    def pending(self) -> int:
        """Requests submitted and not answered yet: fewer than the GPUs means a GPU is about to idle."""
        ...

    def stats(self) -> PoolStats:
        """What the pool did so far: each evaluation's span (the agent loop's latency estimate, ncu's share)."""
        ...

    def gpu_facts(self) -> GpuFacts: ...


class Profiler(Protocol):
    """Optional hardware profile of a candidate (e.g. ncu metrics) beyond the harness's numbers."""

    def __call__(self, source: str, result: EvalResult) -> ProfileFacts: ...
