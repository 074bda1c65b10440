"""The three things the agent loop talks to, as Protocols: a chat model, an evaluator and a profiler.

Anything with these shapes plugs in: the OpenAI-compatible client or a ScriptedModel; the harness's
isolated `evaluate` or a deterministic stand-in in tests; Nsight Compute or nothing.
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable

from astra_sglang.agents.llm import UsageMeter
from astra_sglang.agents.records import Message, ProfileFacts, Reply
from astra_sglang.harness.records import EvalRequest, EvalResult


@runtime_checkable
class Model(Protocol):
    """A chat model that counts what it spends (and raises BudgetExceeded past the run's limits)."""

    name: str
    meter: UsageMeter
    """Spending so far (a resumed run seeds it from the log) and the run's limits."""

    def complete(self, messages: list[Message]) -> Reply:
        """One chat completion; retries transient failures itself, raises LLMError when it gives up."""
        ...


class Evaluator(Protocol):
    """Build + check + time one candidate (astra_sglang.harness.isolate.evaluate has this shape).

    It may also carry `prebuild([(path, defines, arch), ...])`, which the loop calls to build several
    candidates in parallel before evaluating them one at a time."""

    def __call__(self, req: EvalRequest) -> EvalResult: ...


class Profiler(Protocol):
    """Optional hardware profile of a candidate (e.g. ncu metrics) beyond the harness's numbers."""

    def __call__(self, source: str, result: EvalResult) -> ProfileFacts: ...
