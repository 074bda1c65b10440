"""The OpenAI-compatible client against the fake server: usage, cost, retries, timeouts, budgets."""
import pytest
from agent_support import llm_config
from fake_openai import Answer, Fail, FakeOpenAI, Stall

from astra_sglang.agents.llm import BudgetExceeded, LLMError, OpenAIModel, ScriptedModel, price_of
from astra_sglang.agents.records import LLMConfig, Message

HI = [Message(role="user", content="hi")]


def serve(actions):
    queue = list(actions)
    return FakeOpenAI(lambda body: queue.pop(0) if queue else Fail(500))


def test_answer_usage_and_cost():
    with serve([Answer("hello", prompt_tokens=2000, completion_tokens=1000)]) as server:
        model = OpenAIModel(llm_config(server))
        reply = model.complete(HI)
    assert reply.content == "hello"
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (2000, 1000)
    assert reply.usage.cost_usd == pytest.approx((2000 * 1.10 + 1000 * 4.40) / 1e6)
    assert server.requests[0]["model"] == "o4-mini" and server.requests[0]["messages"][0]["content"] == "hi"
    assert "temperature" not in server.requests[0]


@pytest.mark.parametrize("failure", [Fail(429, retry_after=0), Fail(500), Fail(503)])
def test_transient_errors_are_retried_with_backoff(failure):
    sleeps = []
    with serve([failure, failure, Answer("ok")]) as server:
        model = OpenAIModel(llm_config(server), sleep=sleeps.append)
        assert model.complete(HI).content == "ok"
    assert len(server.requests) == 3
    assert sleeps == [pytest.approx(0.01), pytest.approx(0.02)]


def test_retry_after_header_is_honoured_up_to_the_cap():
    sleeps = []
    with serve([Fail(429, retry_after=30), Answer("ok")]) as server:
        OpenAIModel(llm_config(server, max_backoff_s=5), sleep=sleeps.append).complete(HI)
    assert sleeps == [5]


def test_timeout_is_retried():
    with serve([Stall(1.5, Answer("late")), Answer("on time")]) as server:
        model = OpenAIModel(llm_config(server, timeout_s=0.4))
        assert model.complete(HI).content == "on time"


def test_gives_up_with_a_typed_error():
    with serve([Fail(429)] * 3) as server:
        with pytest.raises(LLMError, match="RateLimitError"):
            OpenAIModel(llm_config(server, max_retries=2), sleep=lambda s: None).complete(HI)
    with serve([Fail(400)]) as server:  # a client error is not retried
        with pytest.raises(LLMError, match="BadRequest"):
            OpenAIModel(llm_config(server), sleep=lambda s: None).complete(HI)
        assert len(server.requests) == 1


def test_unknown_model_costs_nothing_but_counts_tokens():
    with serve([Answer("x", 100, 50)]) as server:
        model = OpenAIModel(llm_config(server).model_copy(update={"model": "my-local-coder"}))
        model.complete(HI)
    assert model.meter.total.tokens == 150 and model.meter.total.cost_usd == 0


def test_prices_by_prefix_and_override():
    assert price_of("o4-mini-2025-04-16") == price_of("o4-mini")
    assert price_of("openai/gpt-4o-mini") == (0.15, 0.60)
    assert price_of("mine", {"mine": (1.0, 2.0)}) == (1.0, 2.0)


def test_budgets_raise_before_the_next_request():
    with serve([Answer("a", 600, 500), Answer("b")]) as server:
        model = OpenAIModel(llm_config(server, max_tokens=1000))
        model.complete(HI)
        with pytest.raises(BudgetExceeded, match="token budget"):
            model.complete(HI)
        assert len(server.requests) == 1
    scripted = ScriptedModel(["x" * 4000] * 3, name="o4-mini", config=LLMConfig(budget_usd=0.008))
    scripted.complete(HI)
    scripted.complete(HI)
    with pytest.raises(BudgetExceeded, match=r"budget spent: \$"):
        scripted.complete(HI)
