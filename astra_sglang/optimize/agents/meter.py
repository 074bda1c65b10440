"""What the LLM calls of a run cost: a small price table, the run's running totals and limits, one log
line per call.

Prompt tokens the endpoint served from its prompt cache (`usage.prompt_tokens_details.cached_tokens`) are
priced at the cached rate. An unknown model costs 0 but its tokens still count, so `--max-tokens` works
with any endpoint. BudgetExceeded is raised before a request once a limit is reached; the loop turns it
into a clean stop.
"""
from __future__ import annotations

import datetime as dt
import logging
import threading
from pathlib import Path
from typing import NamedTuple

from astra_sglang.errors import AstraError
from astra_sglang.optimize.records import Usage

log = logging.getLogger("astra_sglang.llm")


class Price(NamedTuple):
    """USD per 1M tokens."""

    prompt: float
    cached: float
    completion: float


# List prices (prompt, cached prompt, completion); dated model names match by prefix.
PRICES: dict[str, Price] = {
    "o4-mini": Price(1.10, 0.275, 4.40),
    "o3-mini": Price(1.10, 0.55, 4.40),
    "o3": Price(2.00, 0.50, 8.00),
    "gpt-4o-mini": Price(0.15, 0.075, 0.60),
    "gpt-4o": Price(2.50, 1.25, 10.00),
    "gpt-4.1-nano": Price(0.10, 0.025, 0.40),
    "gpt-4.1-mini": Price(0.40, 0.10, 1.60),
    "gpt-4.1": Price(2.00, 0.50, 8.00),
    "gpt-5-nano": Price(0.05, 0.005, 0.40),
    "gpt-5-mini": Price(0.25, 0.025, 2.00),
    "gpt-5": Price(1.25, 0.125, 10.00),
}
FREE = Price(0.0, 0.0, 0.0)


class BudgetExceeded(AstraError):
    """The run's token or dollar budget is spent; the loop stops cleanly and keeps what it has."""


def as_price(value: tuple[float, ...]) -> Price:
    """(prompt, completion) or (prompt, cached prompt, completion); a missing cached rate is the prompt rate."""
    if len(value) == 2:
        return Price(value[0], value[0], value[1])
    if len(value) == 3:
        return Price(*value)
    raise AstraError(f"a price is (prompt, completion) or (prompt, cached, completion) USD per 1M tokens: {value!r}")


def price_of(model: str, overrides: dict[str, tuple[float, ...]] | None = None) -> Price:
    table = {**PRICES, **{k: as_price(v) for k, v in (overrides or {}).items()}}
    if model in table:
        return table[model]
    name = model.rsplit("/", 1)[-1]  # "openai/o4-mini" as some gateways spell it
    matches = [k for k in table if name == k or name.startswith(k + "-")]
    return table[max(matches, key=len)] if matches else FREE


class UsageMeter:
    """Running totals for one run, with its limits; safe to share between the threads of a population."""

    def __init__(self, model: str, budget_usd: float | None = None, max_tokens: int | None = None,
                 prices: dict[str, tuple[float, ...]] | None = None, spent: Usage | None = None):
        self.model, self.budget_usd, self.max_tokens = model, budget_usd, max_tokens
        self.price = price_of(model, prices)
        self.total = spent or Usage()
        self.log_path: Path | None = None
        """Where each call's cost line is appended (the run directory's llm.log); None = the logger only."""
        self._lock = threading.Lock()

    def charge(self, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> Usage:
        cached = min(max(cached_tokens, 0), prompt_tokens)
        cost = ((prompt_tokens - cached) * self.price.prompt + cached * self.price.cached
                + completion_tokens * self.price.completion) / 1e6
        used = Usage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, cached_tokens=cached,
                     cost_usd=cost)
        with self._lock:
            self.total = self.total + used
        return used

    def check(self) -> None:
        """Raise BudgetExceeded if a limit is already reached (called before every request)."""
        total = self.total
        if self.budget_usd is not None and total.cost_usd >= self.budget_usd:
            raise BudgetExceeded(f"budget spent: ${total.cost_usd:.4f} of ${self.budget_usd:.4f}")
        if self.max_tokens is not None and total.tokens >= self.max_tokens:
            raise BudgetExceeded(f"token budget spent: {total.tokens} of {self.max_tokens} tokens")

    def record(self, used: Usage, tag: str, endpoint: str, seconds: float, n: int = 1) -> str:
        """The call's cost line: to the logger and, when set, to `log_path`."""
        line = (f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%dT%H:%M:%SZ} {tag or '-'} {self.model} {endpoint}"
                f"{f' n={n}' if n > 1 else ''}: {used.prompt_tokens} prompt ({used.cached_tokens} cached) + "
                f"{used.completion_tokens} completion tokens, ${used.cost_usd:.5f}; run total "
                f"{self.total.tokens} tokens ${self.total.cost_usd:.4f}; {seconds:.1f} s")
        log.info(line)
        if self.log_path is not None:
            with self._lock, open(self.log_path, "a") as f:
                f.write(line + "\n")
        return line
