"""A model (and reasoning effort) per role through the fake OpenAI server, all on one budget; a price for a model
the table does not know (required with a dollar budget); a hard stop whatever the model; tokens estimated where
the server sends no usage; the command line's --model-plan / --model-code / --price / --config."""
import json

import pytest
from agent_support import SUMMARY, TESTS, FreshPlans, StandIn, kernel, llm_config, run_config
from click.testing import CliRunner
from fake_openai import Answer, FakeOpenAI, Server, role_of

from astra_sglang.cli import optimize as cli
from astra_sglang.errors import AstraError
from astra_sglang.optimize.agents.llm import meter_for
from astra_sglang.optimize.agents.loop import run
from astra_sglang.optimize.agents.models import Models
from astra_sglang.optimize.records import LLMConfig, Message, RoleModel


def test_a_model_and_an_effort_per_role(fake, tmp_path):
    server = fake({"testing": [TESTS]},
                  {"profiling": SUMMARY, "planning": FreshPlans(), "coding": kernel("speedup=1.2")})
    config = llm_config(server).model_copy(update={"model": "gpt-5-mini", "roles": {
        "planner": RoleModel(model="o3", reasoning_effort="high"), "reflector": RoleModel(model="gpt-5-nano")}})
    models = Models.from_config(config)
    assert models.describe() == "gpt-5-mini (planner o3, reflector gpt-5-nano)"
    outcome = run(run_config(rounds=1, reflect=True), tmp_path / "r", StandIn(), models)
    sent = {role_of(b): (b["model"], b.get("reasoning_effort")) for b in server.requests}
    assert sent == {"testing": ("gpt-5-mini", None), "profiling": ("gpt-5-mini", None), "planning": ("o3", "high"),
                    "coding": ("gpt-5-mini", None), "reflection": ("gpt-5-nano", None)}
    costs = (tmp_path / "r" / "llm.log").read_text()
    assert " r01 planning o3 chat: 1000 prompt" in costs and "$0.00600" in costs  # o3's price: 2.00 in, 8.00 out
    assert "reflect c0 gpt-5-nano chat" in costs and "(unpriced model)" not in costs
    assert outcome.winner.model == "gpt-5-mini"  # the coder's model wrote the kernel


def test_a_server_that_refuses_reasoning_effort_gets_none(tmp_path):
    with FakeOpenAI(lambda body: Answer("ok"), Server(reasoning_effort=False)) as server:
        models = Models.from_config(llm_config(server, reasoning_effort="low"))
        assert models("coder").complete([Message(role="user", content="hi")]).content == "ok"
        assert models("coder").complete([Message(role="user", content="hi")]).content == "ok"
    assert server.refused == ["Unrecognized request argument supplied: reasoning_effort"]
    assert [b.get("reasoning_effort") for b in server.requests] == [None, None]  # learned once


def test_an_unknown_model_needs_a_price_with_a_budget(fake, tmp_path):
    with pytest.raises(AstraError, match=r"no price known for my-coder: pass --price my-coder=IN/OUT"):
        meter_for(LLMConfig(model="gpt-5", budget_usd=1.0, roles={"coder": RoleModel(model="my-coder")}))
    meter_for(LLMConfig(model="my-coder"))  # no budget: unpriced models only count tokens
    server = fake({"testing": [TESTS]},
                  {"profiling": SUMMARY, "planning": FreshPlans(), "coding": kernel("speedup=1.1")})
    config = llm_config(server, budget_usd=0.01, prices={"my-coder": (2.0, 4.0)})
    config = config.model_copy(update={"model": "my-coder"})
    outcome = run(run_config(rounds=10, max_rounds=10), tmp_path / "r", StandIn(), Models.from_config(config))
    assert outcome.stop_reason.startswith("budget spent")  # a hard stop, for a model the table does not know
    assert outcome.usage.cost_usd == pytest.approx(len(server.requests) * 0.004) and outcome.usage.cost_usd <= 0.01


def test_no_round_starts_that_the_money_left_would_not_pay_for(fake, tmp_path):
    """The adaptive budget's dollar side: a new round starts only while what is spent, plus a round's mean cost for
    each round in flight and the new one, fits the budget; the run stops there, before the meter has to refuse."""
    server = fake({"testing": [TESTS]},
                  {"profiling": SUMMARY, "planning": FreshPlans(), "coding": kernel("speedup=1.1")})
    config = llm_config(server, budget_usd=0.03, prices={"my-coder": (2.0, 4.0)}).model_copy(
        update={"model": "my-coder"})  # $0.004 a request (1000 prompt + 500 completion tokens)
    outcome = run(run_config(rounds=10, max_rounds=10), tmp_path / "r", StandIn(), Models.from_config(config))
    assert outcome.rounds_done == 1 and outcome.usage.cost_usd == pytest.approx(0.02)
    assert outcome.stop_reason == ("budget spent: $0.0200 of $0.0300 (another round would pass it: $0.0200 a round "
                                   "so far)")


def test_answers_are_capped_at_what_the_budget_left_pays_for(fake, tmp_path):
    """A model that answers up to its cap every time (a reasoning model thinking to the limit): each request's cap
    is what is left of the budget after what is spent, what is in flight and its own prompt, so the run stops at
    the budget and never past it, for a model the table does not know too."""
    long = Answer(kernel("speedup=1.1"), prompt_tokens=1000, completion_tokens=100_000)
    server = fake({"testing": [TESTS]}, {"profiling": SUMMARY, "planning": FreshPlans(), "coding": long})
    config = llm_config(server, budget_usd=0.05, prices={"my-coder": (2.0, 4.0)}).model_copy(
        update={"model": "my-coder"})
    outcome = run(run_config(rounds=10, max_rounds=10), tmp_path / "r", StandIn(), Models.from_config(config))
    assert outcome.stop_reason.startswith("budget spent") and outcome.usage.cost_usd <= 0.05
    caps = [b["max_completion_tokens"] for b in server.requests if role_of(b) == "coding"]
    assert caps and caps[0] < 32768 and caps == sorted(caps, reverse=True)  # what is left shrinks call by call
    costs = (tmp_path / "r" / "llm.log").read_text().splitlines()
    assert len(costs) == len(server.requests)


def test_tokens_are_estimated_where_the_server_sends_no_usage(tmp_path):
    with FakeOpenAI(lambda body: Answer("x" * 400), Server(usage=False)) as server:
        models = Models.from_config(llm_config(server))
        models.meter.log_path = tmp_path / "llm.log"
        reply = models("coder").complete([Message(role="user", content="y" * 4000)], tag="r01 coding")
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (1001, 101)
    assert reply.usage.estimated_tokens == 1102 and reply.usage.cost_usd > 0
    assert "(estimated from characters: the server sent no usage)" in (tmp_path / "llm.log").read_text()


def test_the_command_lines_models_prices_and_settings_file(fake, tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setattr(cli, "harness_evaluator", lambda: StandIn())
    server = fake({}, {"testing": TESTS, "planning": FreshPlans(), "coding": kernel("speedup=1.2"),
                       "profiling": SUMMARY})
    base = ["silu_and_mul", "--base-url", server.base_url, "--api-key", "k", "--shapes", "quick", "--rounds", "1",
            "--patches-dir", str(tmp_path / "p")]
    refused = CliRunner().invoke(cli.optimize, [*base, "--llm", "my-coder", "--budget-usd", "1",
                                                "--out", str(tmp_path / "a")])
    assert refused.exit_code == 1 and "no price known for my-coder" in str(refused.exception)
    assert server.requests == [] and not (tmp_path / "a").exists()  # nothing ran
    settings = tmp_path / "agents.toml"
    settings.write_text('speed_turns = 0\nislands = 1\ninflight = 1\nreflect = false\n\n[llm.roles.planner]\n'
                        'model = "o3"\nreasoning_effort = "high"\n')
    ok = CliRunner().invoke(cli.optimize, [*base, "--llm", "my-coder", "--budget-usd", "1", "--price", "my-coder=0.5/2",
                                           "--model-code", "my-coder@low", "--config", str(settings),
                                           "--out", str(tmp_path / "b")])
    assert ok.exit_code == 0, ok.output
    assert "with my-coder (planner o3, coder my-coder)" in ok.output
    saved = json.loads((tmp_path / "b" / "config.json").read_text())
    assert saved["speed_turns"] == 0 and saved["islands"] == 1 and saved["llm"]["prices"] == {"my-coder": [0.5, 2.0]}
    assert saved["llm"]["roles"]["planner"] == {"model": "o3", "reasoning_effort": "high", "base_url": None,
                                                "temperature": None}
    sent = {(role_of(b), b["model"], b.get("reasoning_effort")) for b in server.requests}
    assert ("planning", "o3", "high") in sent and ("coding", "my-coder", "low") in sent
    for args, message in ((["--price", "oops"], "write MODEL=IN/OUT"),
                          (["--model-plan", "o3@max"], "the effort after @"),
                          (["--config", str(tmp_path / "bad.toml")], "unknown or fixed setting(s) kernel, speed_turn")):
        (tmp_path / "bad.toml").write_text('speed_turn = 1\nkernel = "x"\n')
        bad = CliRunner().invoke(cli.optimize, [*base, "--llm", "o4-mini", *args, "--out", str(tmp_path / "c")])
        assert bad.exit_code == 1 and message in str(bad.exception), (args, bad.output)
