"""What the LLM calls of a run cost: a small price table, the run's running totals and limits, one log
line per call.

One meter serves every model of a run (a model per role shares the run's budget), and prices each call
by the model that answered it. Prompt tokens the endpoint served from its prompt cache
(`usage.prompt_tokens_details.cached_tokens`) are priced at the cached rate. A model without a listed
price needs one (`--price MODEL=IN/OUT`) when the run has a dollar budget; without a budget it costs 0
but its tokens still count, so `--max-tokens` works with any endpoint. Where a server sends no usage,
the tokens are estimated from the characters (4 a token) and the cost line says so.

The stop is hard: before a request, the meter admits it only if what is spent, plus what requests
already in flight are expected to cost, plus this one's expected cost stays within the limits
(BudgetExceeded otherwise, which the loop turns into a clean stop), and caps its answer at the tokens what is
left then pays for, so no request alone passes a limit. Requests in flight together can pass it only by what
their answers run over the mean answer so far (each holds its expected cost, not its cap, so that a budget
leaves room for many at once).
"""
from __future__ import annotations

import datetime as dt
import logging
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, NamedTuple

from astra_sglang.errors import AstraError
from astra_sglang.optimize.records import Usage

log = logging.getLogger("astra_sglang.llm")
CHARS_PER_TOKEN = 4
MIN_ANSWER = 64
"""A request whose answer the limits would cap below this many tokens is not sent: no useful answer fits."""


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


def listed_price(model: str, overrides: dict[str, tuple[float, ...]] | None = None) -> Price | None:
    """The model's price from the overrides or the table (by prefix: dated names), None where unknown."""
    table = {**PRICES, **{k: as_price(v) for k, v in (overrides or {}).items()}}
    if model in table:
        return table[model]
    name = model.rsplit("/", 1)[-1]  # "openai/o4-mini" as some gateways spell it
    matches = [k for k in table if name == k or name.startswith(k + "-")]
    return table[max(matches, key=len)] if matches else None


def price_of(model: str, overrides: dict[str, tuple[float, ...]] | None = None) -> Price:
    return listed_price(model, overrides) or FREE


def estimate_tokens(text: str) -> int:
    return len(text) // CHARS_PER_TOKEN + 1


class UsageMeter:
    """Running totals for one run (every model of it), with its limits; safe to share between threads."""

    def __init__(self, budget_usd: float | None = None, max_tokens: int | None = None,
                 prices: dict[str, tuple[float, ...]] | None = None, spent: Usage | None = None):
        self.budget_usd, self.max_tokens, self.prices = budget_usd, max_tokens, dict(prices or {})
        self.total = spent or Usage()
        self.log_path: Path | None = None
        """Where each call's cost line is appended (the run directory's llm.log); None = the logger only."""
        self._lock = threading.Lock()
        self._reserved: dict[int, tuple[float, int]] = {}
        self._calls = 0
        self._answers = 0
        """Answers recorded (a request of n answers counts n): what the completion tokens are spread over."""
        self._seconds = 0.0
        self._completion = 0

    def require_prices(self, models: list[str]) -> None:
        """With a dollar budget every model needs a price: an unpriced one would make the budget meaningless."""
        if self.budget_usd is None:
            return
        missing = [m for m in models if listed_price(m, self.prices) is None]
        if missing:
            raise AstraError(f"no price known for {', '.join(missing)}: pass --price {missing[0]}=IN/OUT (USD per "
                             "1M prompt/completion tokens), or run without --budget-usd")

    def price(self, model: str) -> Price:
        return price_of(model, self.prices)

    def _expected(self, model: str, prompt_tokens: int, n: int) -> tuple[float, int]:
        """A request's expected (cost, tokens): its prompt billed once, n answers of the mean answer so far."""
        completion = self._completion // self._answers if self._answers else 0
        p = self.price(model)
        return (prompt_tokens * p.prompt + n * completion * p.completion) / 1e6, prompt_tokens + n * completion

    @contextmanager
    def admit(self, model: str, prompt_chars: int, n: int = 1) -> Iterator[int | None]:
        """Hold a request's expected cost while it is in flight; BudgetExceeded where it would pass a limit.
        Yields the most answer tokens each of its n answers may take within the limits (None: no limit)."""
        prompt_tokens = prompt_chars // CHARS_PER_TOKEN
        cost, tokens = self._expected(model, prompt_tokens, n)
        with self._lock:
            spent = self.total
            held = sum(c for c, _ in self._reserved.values()), sum(t for _, t in self._reserved.values())
            if self.budget_usd is not None and spent.cost_usd >= self.budget_usd:
                raise BudgetExceeded(f"budget spent: ${spent.cost_usd:.4f} of ${self.budget_usd:.4f}")
            if self.max_tokens is not None and spent.tokens >= self.max_tokens:
                raise BudgetExceeded(f"token budget spent: {spent.tokens} of {self.max_tokens} tokens")
            if self.budget_usd is not None and spent.cost_usd + held[0] + cost > self.budget_usd:
                raise BudgetExceeded(f"budget spent: ${spent.cost_usd:.4f} of ${self.budget_usd:.4f} "
                                     f"(${held[0]:.4f} in flight, this request ~${cost:.4f})")
            if self.max_tokens is not None and spent.tokens + held[1] + tokens > self.max_tokens:
                raise BudgetExceeded(f"token budget spent: {spent.tokens} of {self.max_tokens} tokens "
                                     f"({held[1]} in flight, this request ~{tokens})")
            most = self._most(model, prompt_tokens, n, spent, held)
            if most is not None and most < MIN_ANSWER:
                raise BudgetExceeded(f"budget spent: what is left pays for {max(most, 0)} answer tokens a request, "
                                     f"fewer than {MIN_ANSWER}")
            key = id(object()) ^ len(self._reserved) ^ threading.get_ident()
            while key in self._reserved:
                key += 1
            self._reserved[key] = (cost, tokens)
        try:
            yield most
        finally:
            with self._lock:
                self._reserved.pop(key, None)

    def _most(self, model: str, prompt_tokens: int, n: int, spent: Usage, held: tuple[float, int]) -> int | None:
        """The answer tokens (each of n) that what is left of the limits pays for, after what is spent, what the
        requests in flight hold and this request's prompt (billed once, however many answers)."""
        most = None
        price = self.price(model)
        if self.budget_usd is not None and price.completion > 0:
            left = self.budget_usd - spent.cost_usd - held[0] - prompt_tokens * price.prompt / 1e6
            most = int(left * 1e6 / price.completion / n)
        if self.max_tokens is not None:
            left_tokens = (self.max_tokens - spent.tokens - held[1] - prompt_tokens) // n
            most = left_tokens if most is None else min(most, left_tokens)
        return most

    def charge(self, model: str, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0,
               estimated: bool = False) -> Usage:
        cached = min(max(cached_tokens, 0), prompt_tokens)
        p = self.price(model)
        cost = ((prompt_tokens - cached) * p.prompt + cached * p.cached + completion_tokens * p.completion) / 1e6
        used = Usage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, cached_tokens=cached,
                     cost_usd=cost, estimated_tokens=prompt_tokens + completion_tokens if estimated else 0)
        with self._lock:
            self.total = self.total + used
            self._completion += completion_tokens
        return used

    def mean_seconds(self) -> float | None:
        """Mean seconds of this run's requests so far (None before the first): the scheduler's model latency."""
        with self._lock:
            return self._seconds / self._calls if self._calls else None

    def record(self, used: Usage, tag: str, model: str, endpoint: str, seconds: float, n: int = 1) -> str:
        """The call's cost line: to the logger and, when set, to `log_path`."""
        with self._lock:
            self._calls += 1
            self._answers += n
            self._seconds += seconds
        unpriced = listed_price(model, self.prices) is None
        line = (f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%dT%H:%M:%SZ} {tag or '-'} {model} {endpoint}"
                f"{f' n={n}' if n > 1 else ''}: {used.prompt_tokens} prompt ({used.cached_tokens} cached) + "
                f"{used.completion_tokens} completion tokens, ${used.cost_usd:.5f}"
                f"{' (unpriced model)' if unpriced else ''}"
                f"{' (estimated from characters: the server sent no usage)' if used.estimated_tokens else ''}"
                f"; run total {self.total.tokens} tokens ${self.total.cost_usd:.4f}; {seconds:.1f} s")
        log.info(line)
        if self.log_path is not None:
            with self._lock, open(self.log_path, "a") as f:
                f.write(line + "\n")
        return line
