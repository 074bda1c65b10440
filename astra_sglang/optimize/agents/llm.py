"""A client for any OpenAI-compatible endpoint that adapts to what the server accepts.

It learns the endpoint's protocol from its 400 answers and keeps what it learned for the run:
- no chat template (SGLang serving a model with a plain tokenizer): /v1/completions with our own prompt
  format (harness_templates/prompts/completion.j2) and stop strings;
- no system role: the system prompt becomes the head of the first user message;
- `max_completion_tokens` refused: the cap is sent as `max_tokens`; a cap above the model's output limit
  is lowered to that limit;
- a request that does not fit the model's context: the cap is lowered to what fits (a prompt that alone is
  too long fails that step only: RequestRejected);
- `n` refused, or fewer choices returned: the other samples are separate requests, in parallel;
- `reasoning_effort` refused: it is left out.
Transient failures (429, 5xx, timeouts, lost connections) are retried with backoff; anything else is an
LLMError, which stops the run cleanly. Every call leaves a cost line (meter.py).
"""
from __future__ import annotations

import os
import re
import time
from concurrent.futures import ThreadPoolExecutor
import threading
from dataclasses import dataclass, replace
from typing import Callable

from astra_sglang.errors import AstraError
from astra_sglang.optimize.agents.failures import LLMError, RequestRejected
from astra_sglang.optimize.agents.meter import BudgetExceeded, UsageMeter, estimate_tokens
from astra_sglang.optimize.records import LLMConfig, Message, Reply, Usage

__all__ = ["BudgetExceeded", "LLMError", "OpenAIModel", "RequestRejected", "fold_system", "meter_for"]


def meter_for(config: LLMConfig) -> UsageMeter:
    """The run's meter: its limits and prices; with a dollar budget, every model of the run must be priced."""
    meter = UsageMeter(config.budget_usd, config.max_tokens, config.prices)
    meter.require_prices(config.models())
    return meter


def fold_system(messages: list[Message]) -> list[Message]:
    """For models without a system role: the system text heads the first user message."""
    system = "\n\n".join(m.content for m in messages if m.role == "system")
    rest = [m for m in messages if m.role != "system"]
    if not system:
        return rest
    if rest and rest[0].role == "user":
        return [Message(role="user", content=f"{system}\n\n{rest[0].content}"), *rest[1:]]
    return [Message(role="user", content=system), *rest]


@dataclass
class Protocol:
    """What this endpoint accepts, as learned so far."""

    chat: bool = True
    system_role: bool = True
    cap_param: str = "max_completion_tokens"
    n: bool = True
    cap: int | None = None
    effort: bool = True


_TEMPLATE = re.compile(r"chat[ _]?template", re.I)
_SYSTEM = re.compile(r"system (role|message|prompt)s? (is |are )?not (supported|allowed)|roles must alternate|"
                     r"role[\"' ]*(system)[\"' ]*(is )?(not|un)|support[s]? [\"']?system", re.I)
_CAP = re.compile(r"(unsupported|unrecogni[sz]ed|not supported|unknown|unexpected|extra)[^.]{0,60}"
                  r"max_completion_tokens|"
                  r"max_completion_tokens[^.]{0,60}(not supported|not permitted|unsupported)", re.I)
_AT_MOST = re.compile(r"at most (\d+) (?:completion |output |new )?tokens", re.I)
_CONTEXT = re.compile(r"maximum context length (?:is |of )?(\d+) tokens", re.I)
_INPUT = re.compile(r"(\d+) tokens from the input|\((\d+) in the messages", re.I)
_EFFORT = re.compile(r"reasoning[_ ]effort", re.I)
_TOO_LONG = re.compile(r"input \((\d+) tokens\) is longer than the model's context|prompt is too long", re.I)
STOP = ["\n### User", "\n### System"]
"""Where a completion-endpoint answer ends (the turn markers of completion.j2)."""


class OpenAIModel:
    """Chat (or plain) completions over the `openai` package against any OpenAI-compatible endpoint."""

    def __init__(self, config: LLMConfig, sleep: Callable[[float], None] = time.sleep, meter: UsageMeter | None = None):
        """`meter`: the run's, shared by the models of its roles (default: one of this model's own)."""
        try:
            import openai
        except ImportError:
            raise AstraError("the openai package is missing: pip install openai") from None
        self._openai, self.config, self.name, self._sleep = openai, config, config.model, sleep
        self.meter = meter or meter_for(config)
        self.protocol = Protocol(chat=config.api != "completions", system_role=config.system_role,
                                 cap=config.max_completion_tokens)
        self._learning = threading.Lock()
        self._client = openai.OpenAI(
            api_key=config.api_key or os.environ.get("OPENAI_API_KEY") or "none",
            base_url=config.base_url or os.environ.get("OPENAI_BASE_URL") or None,
            timeout=config.timeout_s, max_retries=0)  # retries are ours: counted, logged, backed off

    @property
    def usage(self) -> Usage:
        return self.meter.total

    def complete(self, messages: list[Message], tag: str = "") -> Reply:
        return self.sample(messages, 1, tag)[0]

    def sample(self, messages: list[Message], n: int, tag: str = "") -> list[Reply]:
        """n answers to one prompt: one request with `n` where the endpoint honours it, else n requests."""
        replies = self._request(messages, n, tag) if n > 1 and self.protocol.n else []
        if 0 < len(replies) < n:
            self.protocol.n = False  # the server ignored `n`: ask for the rest one by one
        missing = n - len(replies)
        if missing == 1:
            replies += self._request(messages, 1, tag)
        elif missing > 1:
            with ThreadPoolExecutor(max_workers=missing) as pool:
                for more in pool.map(lambda _: self._request(messages, 1, tag), range(missing)):
                    replies += more
        return replies[:n]

    # -- one request ------------------------------------------------------------------------------
    def _request(self, messages: list[Message], n: int, tag: str) -> list[Reply]:
        attempt = adaptations = 0
        chars = sum(len(m.content) for m in messages)
        while True:
            start = time.perf_counter()
            sent = replace(self.protocol)
            try:
                with self.meter.admit(self.name, chars, n) as most:  # charged before the hold on the budget ends
                    # the answer capped at what the budget left pays for (a request alone never passes it)
                    within = sent if most is None or (sent.cap is not None and sent.cap <= most) else \
                        replace(sent, cap=most)
                    response = self._send(messages, n, within)
                    return self._replies(messages, response, n, tag, time.perf_counter() - start)
            except self._openai.BadRequestError as exc:
                adaptations += 1
                with self._learning:  # requests in flight at once may all be refused for the same reason
                    learned = self.protocol != sent or self._adapt(str(exc), n)
                if adaptations > 6 or not learned:
                    raise self._rejected(exc) from exc
                if not self.protocol.n:
                    n = 1
            except self._openai.OpenAIError as exc:
                if not self._transient(exc) or attempt == self.config.max_retries:
                    raise LLMError(f"{self.name}: {type(exc).__name__}: {str(exc)[:300]}") from exc
                self._sleep(self._delay(attempt, exc))
                attempt += 1

    def _send(self, messages: list[Message], n: int, p: Protocol):
        kwargs: dict = {"model": self.name}
        if self.config.temperature is not None:
            kwargs["temperature"] = self.config.temperature
        if p.cap is not None:
            kwargs[p.cap_param if p.chat else "max_tokens"] = p.cap
        if n > 1:
            kwargs["n"] = n
        if p.chat and p.effort and self.config.reasoning_effort:
            kwargs["reasoning_effort"] = self.config.reasoning_effort
        if p.chat:
            sent = messages if p.system_role else fold_system(messages)
            return self._client.chat.completions.create(messages=[m.model_dump() for m in sent], **kwargs)
        from astra_sglang.optimize.agents.prompts import completion_prompt

        return self._client.completions.create(prompt=completion_prompt(messages), stop=STOP, **kwargs)

    def _adapt(self, text: str, n: int) -> bool:
        """Change the protocol after a 400 that says what the server does not accept; False = nothing to change."""
        p = self.protocol
        most = _AT_MOST.search(text)
        if p.chat and self.config.api == "auto" and _TEMPLATE.search(text):
            p.chat = False
        elif p.effort and self.config.reasoning_effort and _EFFORT.search(text):
            p.effort = False
        elif p.chat and p.system_role and _SYSTEM.search(text):
            p.system_role = False
        elif most and p.cap is not None and int(most.group(1)) < p.cap:  # the model's own output limit
            p.cap = int(most.group(1))
        elif p.chat and p.cap_param == "max_completion_tokens" and _CAP.search(text):
            p.cap_param = "max_tokens"
        elif (context := _CONTEXT.search(text)) and (used := _INPUT.search(text)) and p.cap is not None:
            fits = int(context.group(1)) - int(used.group(1) or used.group(2)) - 8
            if fits < 64 or fits >= p.cap:
                return False
            p.cap = fits
        elif n > 1 and p.n:
            p.n = False  # a 400 nothing else explains, on a request with n > 1: try without n
        else:
            return False
        return True

    def _rejected(self, exc: Exception) -> LLMError:
        text = str(exc)
        if _TOO_LONG.search(text) or _CONTEXT.search(text):
            return RequestRejected(f"{self.name}: the prompt does not fit the model's context: {text[:300]}")
        return LLMError(f"{self.name}: {type(exc).__name__}: {text[:300]}")

    def _replies(self, messages: list[Message], response, n: int, tag: str, seconds: float) -> list[Reply]:
        choices = response.choices or []
        texts = [(c.message.content if self.protocol.chat else c.text) or "" for c in choices]
        usage = getattr(response, "usage", None)
        details = getattr(usage, "prompt_tokens_details", None)
        prompt, completion = getattr(usage, "prompt_tokens", 0) or 0, getattr(usage, "completion_tokens", 0) or 0
        estimated = not (prompt or completion)  # a server that sends no usage still spends the run's budget
        if estimated:
            prompt = estimate_tokens("".join(m.content for m in messages))
            completion = sum(estimate_tokens(t) for t in texts)
        used = self.meter.charge(self.name, prompt, completion, getattr(details, "cached_tokens", 0) or 0, estimated)
        self.meter.record(used, tag, self.name, "chat" if self.protocol.chat else "completions", seconds, n)
        if not choices:
            raise LLMError(f"{self.name}: the endpoint returned no choices")
        shares = split_usage(used, len(choices))
        model = getattr(response, "model", "") or ""
        return [Reply(content=text, usage=share, model=model, finish_reason=c.finish_reason or "")
                for c, text, share in zip(choices, texts, shares)]

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


def split_usage(used: Usage, k: int) -> list[Usage]:
    """One request's usage shared by its k answers (the totals add up to the request's)."""
    if k <= 1:
        return [used]

    def part(total: int, i: int) -> int:
        return total // k + (total % k if i == 0 else 0)

    return [Usage(prompt_tokens=part(used.prompt_tokens, i), completion_tokens=part(used.completion_tokens, i),
                  cached_tokens=part(used.cached_tokens, i), cost_usd=used.cost_usd / k,
                  estimated_tokens=part(used.estimated_tokens, i)) for i in range(k)]
