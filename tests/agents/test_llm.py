"""The OpenAI-compatible client against the fake server: usage, cost, retries, timeouts, budgets, and the
protocols it adapts to (no chat template, no system role, max_tokens only, `n`, small contexts)."""
import pytest
from agent_support import llm_config
from fake_openai import NO_TEMPLATE, Answer, Fail, FakeOpenAI, Server, Stall

from astra_sglang.optimize.agents.llm import BudgetExceeded, LLMError, OpenAIModel, RequestRejected, fold_system
from astra_sglang.optimize.agents.meter import price_of
from astra_sglang.optimize.agents.scripted import ScriptedModel
from astra_sglang.optimize.records import LLMConfig, Message

HI = [Message(role="user", content="hi")]
SYS = [Message(role="system", content="You are the CodingAgent of Astra."), Message(role="user", content="hi")]


def serve(actions, server=None):
    queue = list(actions)
    return FakeOpenAI(lambda body: queue.pop(0) if queue else Fail(500), server)


def test_answer_usage_and_cost():
    with serve([Answer("hello", prompt_tokens=2000, completion_tokens=1000)]) as server:
        model = OpenAIModel(llm_config(server))
        reply = model.complete(HI)
    assert reply.content == "hello"
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (2000, 1000)
    assert reply.usage.cost_usd == pytest.approx((2000 * 1.10 + 1000 * 4.40) / 1e6)
    assert server.requests[0]["model"] == "o4-mini" and server.requests[0]["messages"][0]["content"] == "hi"
    assert "temperature" not in server.requests[0] and server.requests[0]["max_completion_tokens"] == 32768


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
    assert price_of("openai/gpt-4o-mini") == (0.15, 0.075, 0.60)
    assert price_of("mine", {"mine": (1.0, 2.0)}) == (1.0, 1.0, 2.0)
    assert price_of("mine", {"mine": (1.0, 0.1, 2.0)}).cached == 0.1


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


def test_cached_prompt_tokens_are_priced_as_such_and_logged(tmp_path):
    with serve([Answer("x", prompt_tokens=4000, completion_tokens=1000, cached_tokens=3000)]) as server:
        model = OpenAIModel(llm_config(server))
        model.meter.log_path = tmp_path / "llm.log"
        reply = model.complete(HI, tag="r01 coding")
    assert reply.usage.cached_tokens == 3000
    assert reply.usage.cost_usd == pytest.approx((1000 * 1.10 + 3000 * 0.275 + 1000 * 4.40) / 1e6)
    line = (tmp_path / "llm.log").read_text().strip()
    assert "r01 coding o4-mini chat: 4000 prompt (3000 cached) + 1000 completion tokens, $0.0063" in line


def test_no_chat_template_falls_back_to_completions_with_our_prompt_format():
    with serve([Answer("plan A"), Answer("plan B")], Server(chat_template=False)) as server:
        model = OpenAIModel(llm_config(server))
        assert model.complete(SYS).content == "plan A"
        assert model.complete(SYS).content == "plan B"  # learned: no second chat attempt
    assert server.refused == [NO_TEMPLATE]
    prompt = server.requests[0]["prompt"]
    assert prompt.startswith("### System\nYou are the CodingAgent") and prompt.endswith("### Assistant\n")
    assert "### User\nhi" in prompt and server.requests[0]["stop"] == ["\n### User", "\n### System"]
    assert server.requests[0]["max_tokens"] == 32768  # completion endpoints default to 16 tokens


def test_forced_chat_api_does_not_fall_back():
    with serve([Answer("x")], Server(chat_template=False)) as server:
        with pytest.raises(LLMError, match="chat_template is not set"):
            OpenAIModel(llm_config(server, api="chat")).complete(SYS)


def test_no_system_role_folds_it_into_the_first_user_message():
    with serve([Answer("ok"), Answer("ok")], Server(system_role=False)) as server:
        model = OpenAIModel(llm_config(server))
        model.complete(SYS)
        model.complete(SYS)
    assert server.refused == ["System role not supported"]
    for body in server.requests:
        assert [m["role"] for m in body["messages"]] == ["user"]
        assert body["messages"][0]["content"] == "You are the CodingAgent of Astra.\n\nhi"
    assert fold_system([Message(role="system", content="s")]) == [Message(role="user", content="s")]


def test_max_completion_tokens_refused_is_sent_as_max_tokens():
    with serve([Answer("ok")], Server(max_completion_tokens=False)) as server:
        OpenAIModel(llm_config(server, max_completion_tokens=1000)).complete(HI)
    assert "max_completion_tokens" not in server.requests[0] and server.requests[0]["max_tokens"] == 1000


def test_the_cap_is_lowered_to_fit_a_small_context():
    long = [Message(role="user", content="word " * 3000)]
    with serve([Answer("ok")], Server(context_len=8192)) as server:
        model = OpenAIModel(llm_config(server))
        assert model.complete(long).content == "ok"
    assert server.requests[0]["max_completion_tokens"] == 8192 - 3000 - 8
    with serve([], Server(context_len=2000)) as server:  # the prompt alone does not fit: this step fails
        with pytest.raises(RequestRejected, match="does not fit"):
            OpenAIModel(llm_config(server)).complete(long)


@pytest.mark.parametrize("mode", ["yes", "ignore", "refuse"])
def test_n_samples_in_one_request_or_several(mode):
    with serve([Answer(f"a{i}", prompt_tokens=900, completion_tokens=300) for i in range(3)],
               Server(n=mode)) as server:
        model = OpenAIModel(llm_config(server))
        replies = model.sample(HI, 3, tag="r01 coding")
    assert sorted(r.content for r in replies) == ["a0", "a1", "a2"]
    assert len(server.requests) == (1 if mode == "yes" else 3 if mode == "refuse" else 3)
    assert model.protocol.n == (mode == "yes")
    spent = sum((r.usage for r in replies), type(replies[0].usage)())
    assert spent == model.usage  # the shares of a request add up to what it cost


def test_scripted_model_samples_and_latency():
    model = ScriptedModel(["a", "b", "c"], latency_s=0.01)
    assert [r.content for r in model.sample(HI, 2)] == ["a", "b"] and model.complete(HI).content == "c"
    with pytest.raises(LLMError, match="exhausted"):
        model.complete(HI)


def test_a_cap_above_the_models_output_limit_is_lowered():
    limit = ("max_completion_tokens is too large: 32768. This model supports at most 16384 completion tokens, "
             "whereas you provided 32768.")

    class Limited(FakeOpenAI):
        def refusal(self, body, chat):
            return limit if body.get("max_completion_tokens", 0) > 16384 else ""

    with Limited(lambda body: Answer("ok")) as server:
        model = OpenAIModel(llm_config(server))
        assert model.complete(HI).content == "ok"
    assert server.requests[0]["max_completion_tokens"] == 16384 and model.protocol.cap_param == "max_completion_tokens"
