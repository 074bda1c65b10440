"""The population loop against the fake server: several candidates a round (n samples a plan), repairs
with the build log or the mismatching shapes, the planner's view (diverse best kernels, past plans with
per-shape results, GPU facts, bottleneck), early stop at the floor, no LLM spending without a baseline,
and the per-shape dispatch among the finalists."""
import json

import pytest
from agent_support import SUMMARY, TESTS, StandIn, kernel, llm_config, run_config
from fake_openai import FakeOpenAI, Server, role_of

from astra_sglang.optimize.agents.database import Database, Entry
from astra_sglang.optimize.agents.journal import RunLog
from astra_sglang.optimize.agents.llm import OpenAIModel
from astra_sglang.optimize.agents.loop import run
from astra_sglang.optimize.agents.scripted import ScriptedModel

R1 = {"plans": [{"parent": "r00", "plan": "1. Vectorize loads."}, {"parent": "r00", "plan": "2. Use __expf."}]}
R2 = {"plans": [{"parent": "r01-c3-a0", "plan": "3. Keep the small-shape path, widen the large one."}]}


class Scripted:
    """Answers by what is asked: a round's plans, a plan's drafts (in order), a repair by its failure."""

    def __init__(self):
        self.drafts = {
            "1. Vectorize loads.": [kernel("speedup=1.2"), kernel("build_fail")],
            "2. Use __expf.": [kernel("wrong"), kernel("small=1.6", "// MARK large=0.96\n")],
            "3. Keep the small": [kernel("large=1.4", "// MARK small=1.0\n"), kernel("speedup=1.25"),
                                  kernel("large=1.4", "// MARK small=1.0\n"), kernel("crash")]}
        self.repairs = {"does not compile": kernel("speedup=1.1"), "incorrect at": kernel("speedup=1.15"),
                        "failed at crash": kernel("speedup=1.05")}
        self.planned = 0

    def __call__(self, body):
        role, messages = role_of(body), body["messages"]
        if role == "testing":
            return TESTS
        if role == "profiling":
            return SUMMARY
        if role == "planning":
            self.planned += 1
            return "```json\n" + json.dumps(R1 if self.planned == 1 else R2) + "\n```"
        if len(messages) > 2:  # the candidate's conversation goes on: a repair
            return next(a for k, a in self.repairs.items() if k in messages[-1]["content"])
        return next(q.pop(0) for plan, q in self.drafts.items() if plan in messages[-1]["content"])


def test_population_round_repairs_database_and_dispatch(tmp_path):
    with FakeOpenAI(Scripted(), Server(n="yes")) as server:
        config = run_config(population=4, plans=2, repairs=2, rounds=2, finalists=3)
        outcome = run(config, tmp_path / "r", StandIn(), OpenAIModel(llm_config(server)))
    log = RunLog(tmp_path / "r")
    cands = {r.payload["id"]: r.payload for r in log.of_role("cand")}
    assert {k: (v["status"], v["attempts"]) for k, v in cands.items() if k.startswith("r01")} == {
        "r01-c0-a0": ("ok", 1), "r01-c1-a1": ("ok", 2), "r01-c2-a1": ("ok", 2), "r01-c3-a0": ("ok", 1)}
    coding = [b for b in server.requests if role_of(b) == "coding"]
    drafts = [b for b in coding if len(b["messages"]) == 2]
    assert sorted(b.get("n", 1) for b in drafts) == [2, 2, 4]  # one request per plan, n samples each
    assert "nvcc -std=c++20" in drafts[0]["messages"][0]["content"]  # the build's flag, not a copy of it
    repairs = [b["messages"][-1]["content"] for b in coding if len(b["messages"]) > 2]
    assert any('identifier "half3" is undefined' in m for m in repairs)  # the build log goes back
    assert any("incorrect at 6 case(s)" in m and "1x14336 bfloat16: mismatch (error 40x the tolerance)" in m
               for m in repairs)  # and the mismatching shapes
    planning = [b["messages"][-1]["content"] for b in server.requests if role_of(b) == "planning"]
    second = planning[1]
    assert "GPU: FakeGPU" in second and "measured copy roofline 4000 GB/s" in second
    assert "round 1 plan 1 (on r00): 2. Use __expf." in second
    assert "-> r01-c2-a1 (from r00): ok 1.150x after 1 repair(s)" in second
    assert "- r01-c3-a0 (from r00): ok" in second and "1x14336/bfloat16 1.60" in second  # a shape's champion
    assert "Bottleneck of the best kernel" in second
    parent = next(b for b in drafts if "3. Keep the small" in b["messages"][-1]["content"])
    assert "Parent kernel (r01-c3-a0" in parent["messages"][-1]["content"]
    assert "MARK small=1.6" in parent["messages"][-1]["content"]
    # the winner: small shapes from r01-c3-a0, large ones from r02-c0-a0, measured on held-out shapes too
    w = outcome.winner
    finals = {r.key: r.payload for r in log.of_role("final")}
    assert w.candidate == "dispatch" and w.speedup > max(
        (json_geomean(p) for k, p in finals.items() if k != "dispatch"))
    dispatch = (tmp_path / "r" / "candidates" / "final-dispatch.cu").read_text()
    assert "-> r01-c3-a0" in dispatch and "-> r02-c0-a0" in dispatch
    assert (tmp_path / "r" / "patch" / "silu_and_mul" / "kernel.cu").read_text() == dispatch


def json_geomean(payload: dict) -> float:
    from astra_sglang.harness.records import EvalResult

    return EvalResult.model_validate(payload).geomean_speedup or 0.0


def test_early_stop_at_the_floor(fake, tmp_path):
    server = fake({"testing": [TESTS], "planning": ["1. Vectorize all loads and stores."] * 3,
                   "coding": [kernel("speedup=2.5")] * 3}, {"profiling": SUMMARY})
    outcome = run(run_config(rounds=3), tmp_path / "r", StandIn(), OpenAIModel(llm_config(server)))
    assert "r01-c0-a0 is within 5% of the floor at every shape" in outcome.stop_reason
    assert outcome.rounds_done == 1 and server.roles().count("coding") == 1


def test_no_llm_spending_when_the_baseline_cannot_be_evaluated(fake, tmp_path):
    start = tmp_path / "start.cu"
    start.write_text(kernel("crash").split("```cuda\n")[1].split("```")[0])
    server = fake({}, {"planning": "1. Anything at all here."})
    outcome = run(run_config(start_source=str(start)), tmp_path / "r", StandIn(), OpenAIModel(llm_config(server)))
    assert server.requests == [] and outcome.winner is None
    assert outcome.baseline_error.startswith("the start kernel could not be evaluated (crash: illegal memory")
    assert "no LLM was asked" in (tmp_path / "r" / "report.md").read_text()


def test_budget_stop_inside_a_population(fake, tmp_path):
    server = fake({"testing": [TESTS]}, {"profiling": SUMMARY, "planning": "1. Vectorize all loads and stores.",
                                         "coding": kernel("wrong")})
    model = OpenAIModel(llm_config(server, budget_usd=0.012))  # 3 calls at $0.0033, then the n=3 drafts at $0.0077
    outcome = run(run_config(population=3, plans=1, repairs=3, rounds=3), tmp_path / "r", StandIn(), model)
    assert outcome.stop_reason.startswith("budget spent") and outcome.winner is None
    assert len(server.requests) == 4 and server.requests[-1]["n"] == 3  # no repair was paid for
    spent = sum(json.loads(x)["usage"]["cost_usd"] for x in (tmp_path / "r" / "rounds.jsonl").read_text().splitlines())
    assert spent == pytest.approx(model.usage.cost_usd) == pytest.approx(3 * 0.0033 + 0.0077)


def test_elites_keep_each_shapes_champion_and_drop_duplicates():
    def entry(id, speedup, shapes, fp=None):
        return Entry(id=id, round=1, source="", status="ok", speedup=speedup, shapes=shapes, fingerprint=fp or id)

    db = Database()
    db.add(entry("r00", 1.0, {"a": 1.0, "b": 1.0}))
    db.add(entry("r01-c0-a0", 1.30, {"a": 1.7, "b": 1.0}))
    db.add(entry("r01-c1-a0", 1.25, {"a": 1.2, "b": 1.3}, fp="same"))
    db.add(entry("r01-c2-a0", 1.28, {"a": 1.6, "b": 1.02}))
    db.add(entry("r01-c3-a0", 1.25, {"a": 1.2, "b": 1.3}, fp="same"))
    assert [e.id for e in db.elites(2)] == ["r01-c0-a0", "r01-c1-a0"]  # b's champion beats a higher geomean
    assert [e.id for e in db.elites(5)] == ["r01-c0-a0", "r01-c1-a0", "r01-c2-a0", "r00"]  # one of the twins
    assert db.at_floor(0.05) is None


def test_resume_mid_population_asks_nothing_twice(tmp_path):
    answers = {"n": 0}

    def script(messages):
        answers["n"] += 1
        system = messages[0].content
        if "TestingAgent" in system:
            return TESTS
        if "PlanningAgent" in system:
            return "```json\n" + json.dumps(R1) + "\n```"
        if "ProfilingAgent" in system:
            return SUMMARY
        return kernel("build_fail") if len(messages) == 2 else kernel("speedup=1.2")

    config = run_config(population=2, plans=1, repairs=1, rounds=1)
    first = run(config, tmp_path / "r", StandIn(), ScriptedModel(script, name="o4-mini"))
    asked = answers["n"]
    again = run(config, tmp_path / "r", StandIn(), ScriptedModel(script, name="o4-mini"))
    assert answers["n"] == asked and again.winner.candidate == first.winner.candidate
    assert first.winner.candidate in ("r01-c0-a1", "r01-c1-a1")


def test_llm_plus_tuner_tunes_a_finalists_knobs(fake, tmp_path):
    """A candidate that exposes knobs (the tuner's convention) is tuned per shape at the end; the tuned
    kernel wins when it is faster (the stand-in times THREADS=64 at 1.2x)."""
    from pathlib import Path

    knobbed = (Path(__file__).parents[1] / "fixtures" / "honest" / "silu_and_mul_knobs.cu").read_text()
    answer = "```cuda\n// MARK speedup=1.2\n// MARK knob_fast=64\n" + knobbed + "```"
    server = fake({"testing": [TESTS], "planning": ["1. Expose the block size as a knob."], "coding": [answer]},
                  {"profiling": SUMMARY})
    outcome = run(run_config(rounds=1, tune_configs=4), tmp_path / "r", StandIn(), OpenAIModel(llm_config(server)))
    w = outcome.winner
    assert w.candidate == "r01-c0-a0-tuned" and w.method == "llm+tuner" and w.speedup == pytest.approx(1.44)
    tuned = (tmp_path / "r" / "tuning" / "r01-c0-a0" / "candidates" / "final.cu").read_text()
    assert "astra_launch_cfg<64, " in tuned


def test_survives_an_sglang_server_with_dummy_weights(tmp_path):
    """SGLang serving a model with a plain tokenizer and random weights: chat answers 400 (no template), the
    context is small, every answer is noise. All rounds still run; nothing stops the loop."""
    noise = " ".join(["lorem", "ipsum", "dolor"] * 1000)
    with FakeOpenAI(lambda body: noise, Server(chat_template=False, context_len=5000)) as server:
        config = run_config(population=2, plans=1, repairs=1, rounds=2)
        outcome = run(config, tmp_path / "r", StandIn(), OpenAIModel(llm_config(server)))
    assert outcome.rounds_done == 2 and outcome.stop_reason == "" and outcome.winner is None
    assert all("prompt" in b for b in server.requests)  # completions, with our own prompt format
    assert server.refused[0].startswith("Cannot use chat template functions")
    cands = [r.payload for r in RunLog(tmp_path / "r").of_role("cand")]
    assert len(cands) == 4 and {c["status"] for c in cands} == {"parse"}
    assert any("does not fit the model's context" in c["detail"] for c in cands)  # a repair that outgrew it
    assert "completions" in (tmp_path / "r" / "llm.log").read_text()
