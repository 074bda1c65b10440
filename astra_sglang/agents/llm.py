"""Chat models for the agents: a client for any OpenAI-compatible endpoint and a scripted stand-in.

Both share a UsageMeter: it counts prompt/completion tokens, prices them from a small table
(overridable; an unknown model costs 0 but its tokens still count) and raises BudgetExceeded once the
run's `--budget-usd` / `--max-tokens` is used up, which the loop turns into a clean stop.
"""
from __future__ import annotations

import os
import time
from typing import Callable, Iterable

from astra_sglang.agents.records import LLMConfig, Message, Reply, Usage
from astra_sglang.errors import AstraError

# USD per 1M (prompt, completion) tokens, list prices; dated model names match by prefix.
PRICES: dict[str, tuple[float, float]] = {
    "o4-mini": (1.10, 4.40),
    "o3-mini": (1.10, 4.40),
    "o3": (2.00, 8.00),
    "gpt-4o-mini": (0.15, 0.60),
    "gpt-4o": (2.50, 10.00),
    "gpt-4.1-nano": (0.10, 0.40),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1": (2.00, 8.00),
    "gpt-5-nano": (0.05, 0.40),
    "gpt-5-mini": (0.25, 2.00),
    "gpt-5": (1.25, 10.00),
}


class LLMError(AstraError):
    """The endpoint kept failing (after retries) or answered nothing usable."""


class BudgetExceeded(AstraError):
    """The run's token or dollar budget is spent; the loop stops cleanly and keeps what it has."""


def price_of(model: str, overrides: dict[str, tuple[float, float]] | None = None) -> tuple[float, float]:
    table = {**PRICES, **(overrides or {})}
    if model in table:
        return table[model]
    name = model.rsplit("/", 1)[-1]  # "openai/o4-mini" as some gateways spell it
    matches = [k for k in table if name == k or name.startswith(k + "-")]
    return table[max(matches, key=len)] if matches else (0.0, 0.0)


class UsageMeter:
    """Running totals for one run, with its limits."""

    def __init__(self, model: str, budget_usd: float | None = None, max_tokens: int | None = None,
                 prices: dict[str, tuple[float, float]] | None = None, spent: Usage | None = None):
        self.model, self.budget_usd, self.max_tokens = model, budget_usd, max_tokens
        self.prompt_price, self.completion_price = price_of(model, prices)
        self.total = spent or Usage()

    def charge(self, prompt_tokens: int, completion_tokens: int) -> Usage:
        cost = (prompt_tokens * self.prompt_price + completion_tokens * self.completion_price) / 1e6
        used = Usage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, cost_usd=cost)
        self.total = self.total + used
        return used

    def check(self) -> None:
        """Raise BudgetExceeded if a limit is already reached (called before every request)."""
        if self.budget_usd is not None and self.total.cost_usd >= self.budget_usd:
            raise BudgetExceeded(f"budget spent: ${self.total.cost_usd:.4f} of ${self.budget_usd:.4f}")
        if self.max_tokens is not None and self.total.tokens >= self.max_tokens:
            raise BudgetExceeded(f"token budget spent: {self.total.tokens} of {self.max_tokens} tokens")


def _meter(config: LLMConfig) -> UsageMeter:
    return UsageMeter(config.model, config.budget_usd, config.max_tokens, config.prices)


class OpenAIModel:
    """Chat completions over the `openai` package against any OpenAI-compatible endpoint."""

    def __init__(self, config: LLMConfig, sleep: Callable[[float], None] = time.sleep):
        try:
            import openai
        except ImportError:
            raise AstraError("the openai package is missing: pip install openai") from None
        self._openai, self.config, self.name, self._sleep = openai, config, config.model, sleep
        self.meter = _meter(config)
        self._client = openai.OpenAI(
            api_key=config.api_key or os.environ.get("OPENAI_API_KEY") or "none",
            base_url=config.base_url or os.environ.get("OPENAI_BASE_URL") or None,
            timeout=config.timeout_s, max_retries=0)  # retries are ours: counted, logged, backed off

    @property
    def usage(self) -> Usage:
        return self.meter.total

    def _transient(self, exc: Exception) -> bool:
        o = self._openai
        if isinstance(exc, (o.RateLimitError, o.APITimeoutError, o.APIConnectionError, o.InternalServerError)):
            return True
        return isinstance(exc, o.APIStatusError) and exc.status_code >= 500

    def _delay(self, attempt: int, exc: Exception) -> float:
        delay = self.config.backoff_s * 2 ** attempt
        headers = getattr(getattr(exc, "response", None), "headers", None) or {}
        try:
            delay = max(delay, float(headers.get("retry-after", 0)))
        except (TypeError, ValueError):
            pass
        return min(delay, self.config.max_backoff_s)

    def complete(self, messages: list[Message]) -> Reply:
        self.meter.check()
        kwargs: dict = {"model": self.name, "messages": [m.model_dump() for m in messages]}
        if self.config.temperature is not None:
            kwargs["temperature"] = self.config.temperature
        if self.config.max_completion_tokens is not None:
            kwargs["max_completion_tokens"] = self.config.max_completion_tokens
        for attempt in range(self.config.max_retries + 1):
            try:
                response = self._client.chat.completions.create(**kwargs)
                break
            except self._openai.OpenAIError as exc:
                if not self._transient(exc) or attempt == self.config.max_retries:
                    raise LLMError(f"{self.name}: {type(exc).__name__}: {str(exc)[:300]}") from exc
                self._sleep(self._delay(attempt, exc))
        usage = getattr(response, "usage", None)
        used = self.meter.charge(getattr(usage, "prompt_tokens", 0) or 0, getattr(usage, "completion_tokens", 0) or 0)
        if not response.choices:
            raise LLMError(f"{self.name}: the endpoint returned no choices")
        choice = response.choices[0]
        return Reply(content=choice.message.content or "", usage=used, model=getattr(response, "model", "") or "",
                     finish_reason=choice.finish_reason or "")


Script = Iterable[str] | Callable[[list[Message]], str]


class ScriptedModel:
    """A deterministic model: replays scripted answers in order, or asks a function of the messages.

    Tokens are estimated (4 characters a token) and priced like the named model, so budgets work.
    """

    def __init__(self, script: Script, name: str = "scripted", config: LLMConfig | None = None):
        self.name = name
        self.meter = _meter((config or LLMConfig()).model_copy(update={"model": name}))
        self._fn = script if callable(script) else None
        self._answers = [] if callable(script) else list(script)
        self.calls: list[list[Message]] = []

    @property
    def usage(self) -> Usage:
        return self.meter.total

    def complete(self, messages: list[Message]) -> Reply:
        self.meter.check()
        self.calls.append(list(messages))
        if self._fn is not None:
            text = self._fn(messages)
        elif self._answers:
            text = self._answers.pop(0)
        else:
            raise LLMError("scripted model: script exhausted")
        prompt = sum(len(m.content) for m in messages) // 4 + 1
        used = self.meter.charge(prompt, len(text) // 4 + 1)
        return Reply(content=text, usage=used, model=self.name, finish_reason="stop")
