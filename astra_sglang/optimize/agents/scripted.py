"""A deterministic model: replays scripted answers in order, or asks a function of the messages.

It stands in for an endpoint in tests and in the agent-loop benchmark (no external LLM): tokens are
estimated (4 characters a token) and priced like the named model, so budgets and cost lines work, and an
optional fixed latency per request makes a run's timing resemble a real endpoint's.
"""
from __future__ import annotations

import threading
import time
from typing import Callable, Iterable

from astra_sglang.optimize.agents.llm import LLMError
from astra_sglang.optimize.agents.meter import UsageMeter
from astra_sglang.optimize.records import LLMConfig, Message, Reply, Usage

Script = Iterable[str] | Callable[[list[Message]], str]


class ScriptExhausted(LLMError):
    """The scripted model has no answer left."""


class ScriptedModel:
    def __init__(self, script: Script, name: str = "scripted", config: LLMConfig | None = None,
                 latency_s: float = 0.0):
        self.name, self.latency_s = name, latency_s
        config = (config or LLMConfig()).model_copy(update={"model": name})
        self.meter = UsageMeter(name, config.budget_usd, config.max_tokens, config.prices)
        self._fn = script if callable(script) else None
        self._answers = [] if callable(script) else list(script)
        self._lock = threading.Lock()
        self.calls: list[list[Message]] = []

    @property
    def usage(self) -> Usage:
        return self.meter.total

    def complete(self, messages: list[Message], tag: str = "") -> Reply:
        return self.sample(messages, 1, tag)[0]

    def sample(self, messages: list[Message], n: int, tag: str = "") -> list[Reply]:
        """n answers, as one request (the latency is paid once)."""
        self.meter.check()
        start = time.perf_counter()
        with self._lock:  # answers are handed out in request order, whatever thread asks
            self.calls.append(list(messages))
            texts = [self._next(messages) for _ in range(n)]
        if self.latency_s:
            time.sleep(self.latency_s)
        prompt = sum(len(m.content) for m in messages) // 4 + 1
        replies = []
        for i, text in enumerate(texts):
            used = self.meter.charge(prompt if i == 0 else 0, len(text) // 4 + 1)
            self.meter.record(used, tag, "scripted", time.perf_counter() - start)
            replies.append(Reply(content=text, usage=used, model=self.name, finish_reason="stop"))
        return replies

    def _next(self, messages: list[Message]) -> str:
        if self._fn is not None:
            return self._fn(messages)
        if not self._answers:
            raise ScriptExhausted("scripted model: script exhausted")
        return self._answers.pop(0)
