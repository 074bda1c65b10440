"""The Algorithm-1 loop end to end: the real openai client against the fake server, a stand-in evaluator."""
import json

import pytest
from agent_support import PLAN, SUMMARY, TESTS, Killed, StandIn, kernel, llm_config, run_config
from fake_openai import Answer, Fail, Stall

from astra_sglang.optimize.agents.journal import RunLog
from astra_sglang.optimize.agents.llm import OpenAIModel
from astra_sglang.optimize.agents.loop import resume, run
from astra_sglang.optimize.agents.scripted import ScriptedModel
from astra_sglang.patchset.manifest import PatchManifest
from astra_sglang.specs.registry import get_spec, resolve_shapes


def rounds(run_dir):
    return {r.round: r.payload for r in RunLog(run_dir).of_role("round")}


def test_good_run(fake, tmp_path):
    server = fake({"testing": [TESTS], "planning": [PLAN] * 2,
                   "coding": [kernel("speedup=1.2"), kernel("speedup=1.4")]}, {"profiling": SUMMARY})
    evaluator = StandIn()
    outcome = run(run_config(), tmp_path / "run", evaluator, OpenAIModel(llm_config(server)))
    assert server.roles() == ["testing", "profiling", "planning", "coding", "profiling", "planning", "coding",
                              "profiling"]
    w = outcome.winner
    assert w is not None and w.round == 2 and w.speedup == pytest.approx(1.4) and w.method == "llm"
    # the suite: quick shapes + the valid proposals ([3,5,7] has 3 dims, [0,4] breaks the constraints)
    quick = resolve_shapes(get_spec("silu_and_mul"), "quick")
    assert evaluator.calls[0].shapes == quick and evaluator.calls[0].trials == 3  # the baseline, before any LLM call
    assert evaluator.calls[1].shapes == quick + [(7, 4100), (1, 128)] and evaluator.calls[1].trials == 4
    # the final evaluation adds held-out shapes the agents never saw
    held = resolve_shapes(get_spec("silu_and_mul"), "held_out")
    assert all(s in evaluator.calls[-1].shapes for s in held)
    assert not any(str(list(h)).replace(" ", "") in json.dumps(r).replace(" ", "") for h in held for r in server.requests)
    run_dir = tmp_path / "run"
    assert {p.name for p in (run_dir / "candidates").iterdir()} == {"r00.cu", "r01-c0-a0.cu", "r02-c0-a0.cu"}
    assert (run_dir / "transcripts" / "r01-draft-p0.json").exists() and (run_dir / "report.md").exists()
    assert (run_dir / "speedup.png").exists()
    manifest = PatchManifest.load(run_dir / "patch" / "silu_and_mul")
    assert manifest.provenance.method == "llm" and manifest.provenance.model == "o4-mini"
    assert manifest.provenance.gpu == "FakeGPU" and manifest.measured[0].speedup == pytest.approx(1.4)
    assert "/" not in manifest.provenance.started_from.split("kernels/")[-1]
    assert outcome.usage.prompt_tokens == 8 * 1000 and outcome.usage.cost_usd == pytest.approx(8 * 0.0033)
    lines = [json.loads(x) for x in (run_dir / "rounds.jsonl").read_text().splitlines()]
    assert sum(x["usage"]["cost_usd"] for x in lines) == pytest.approx(outcome.usage.cost_usd)
    calls = (run_dir / "llm.log").read_text().splitlines()  # one cost line per call
    assert len(calls) == 8 and "r01 coding p0 o4-mini chat: 1000 prompt (0 cached) + 500 completion" in calls[3]


def test_malformed_then_unsafe_answers_are_fed_back(fake, tmp_path):
    server = fake({"testing": ["no json here", TESTS], "planning": [PLAN],
                   "coding": ["I'd vectorize it.", kernel("speedup=1.1")]}, {"profiling": SUMMARY})
    outcome = run(run_config(rounds=1, repairs=1), tmp_path / "r", StandIn(), OpenAIModel(llm_config(server)))
    assert outcome.winner is not None and outcome.winner.round == 1 and outcome.winner.candidate == "r01-c0-a1"
    retry = server.requests[-2]["messages"]  # the coder's second request carries the feedback
    assert "could not be used" in retry[-1]["content"] and "no fenced code block" in retry[-1]["content"]
    transcript = json.loads((tmp_path / "r" / "transcripts" / "r01-code-c0a0.json").read_text())
    assert len(transcript["errors"]) == 1
    # unsafe code twice: the candidate gives up (one repair), it is logged as unsafe, the run goes on
    server = fake({"testing": [TESTS], "planning": [PLAN] * 2,
                   "coding": [kernel("speedup=2", 'static void f() { system("id"); }\n')] * 2 + [kernel("speedup=1.3")]},
                  {"profiling": SUMMARY})
    outcome = run(run_config(repairs=1), tmp_path / "u", StandIn(), OpenAIModel(llm_config(server)))
    assert rounds(tmp_path / "u")[1]["status"] == "unsafe" and outcome.winner.round == 2
    assert not list((tmp_path / "u" / "candidates").glob("r01-*.cu"))
    assert "system names a process" in server.requests[4]["messages"][-1]["content"]


def test_build_fail_crash_wrong_and_held_out(fake, tmp_path):
    server = fake({"testing": [TESTS], "planning": [PLAN] * 5,
                   "coding": [kernel("build_fail"), kernel("crash"), kernel("wrong"),
                              kernel("speedup=1.5", "// MARK heldout_wrong\n"), kernel("speedup=1.2")]},
                  {"profiling": SUMMARY})
    outcome = run(run_config(rounds=5), tmp_path / "r", StandIn(), OpenAIModel(llm_config(server)))
    status = {r: p["status"] for r, p in rounds(tmp_path / "r").items()}
    assert status == {0: "ok", 1: "build", 2: "crash", 3: "wrong", 4: "ok", 5: "ok"}
    # round 4 is fastest on the suite but wrong on held-out shapes: round 5 wins
    assert outcome.winner.round == 5 and outcome.winner.speedup == pytest.approx(1.2)
    plans = [r for r in server.requests if "PlanningAgent" in r["messages"][0]["content"]]
    assert "r01-c0-a0 (from r00): build (nvcc failed)" in plans[1]["messages"][-1]["content"]
    assert "illegal memory access" in plans[2]["messages"][-1]["content"]
    assert "incorrect" in plans[3]["messages"][-1]["content"]


def test_rate_limits_and_timeouts_inside_the_loop(fake, tmp_path):
    server = fake({"testing": [Fail(429, 0), TESTS], "planning": [Stall(1.2, Answer(PLAN)), PLAN],
                   "coding": [Fail(500), kernel("speedup=1.3")]}, {"profiling": SUMMARY})
    outcome = run(run_config(rounds=1), tmp_path / "r", StandIn(), OpenAIModel(llm_config(server, timeout_s=0.5)))
    assert outcome.winner.round == 1 and not outcome.stop_reason


def test_endpoint_down_stops_cleanly(fake, tmp_path):
    server = fake({"testing": [TESTS], "planning": [PLAN], "coding": [kernel("speedup=1.3")]},
                  {"profiling": SUMMARY, "planning": Fail(503)})
    outcome = run(run_config(rounds=3), tmp_path / "r", StandIn(), OpenAIModel(llm_config(server, max_retries=1)))
    assert "InternalServerError" in outcome.stop_reason and outcome.rounds_done == 1
    assert outcome.winner.round == 1  # the final evaluation still ran on what exists
    assert RunLog(tmp_path / "r").of_role("stop")


def test_budget_stop_and_cost_accounting(fake, tmp_path):
    server = fake({"testing": [TESTS]}, {"profiling": SUMMARY, "planning": PLAN, "coding": kernel("speedup=1.1")})
    model = OpenAIModel(llm_config(server, budget_usd=0.02))  # 0.0033 a call -> 7 calls
    outcome = run(run_config(rounds=5), tmp_path / "r", StandIn(), model)
    assert len(server.requests) == 7 and outcome.stop_reason.startswith("budget spent")
    assert outcome.usage.cost_usd == pytest.approx(7 * 0.0033) and outcome.winner is not None
    assert "stopped early: budget spent" in (tmp_path / "r" / "report.md").read_text()


def test_resume_after_kill_loses_no_round(fake, tmp_path):
    server = fake({"testing": [TESTS], "planning": [PLAN] * 3,
                   "coding": [kernel("speedup=1.2"), kernel("speedup=1.3", "// MARK kill\n"), kernel("speedup=1.5")]},
                  {"profiling": SUMMARY})
    run_dir = tmp_path / "r"
    with pytest.raises(Killed):
        run(run_config(rounds=3), run_dir, StandIn(kill_on="kill"), OpenAIModel(llm_config(server)))
    asked = len(server.requests)
    with open(run_dir / "rounds.jsonl", "a") as f:
        f.write('{"round": 2, "role": "ev')  # a line torn by the kill
    evaluator = StandIn()
    outcome = resume(run_dir, evaluator, OpenAIModel(llm_config(server)))
    # round 2's plan and code were logged: resume evaluates the same candidate without asking again
    assert server.roles()[asked:] == ["profiling", "planning", "coding", "profiling"]
    assert evaluator.calls[0].candidate.path.endswith("r02-c0-a0.cu")
    assert sorted(rounds(run_dir)) == [0, 1, 2, 3] and outcome.winner.round == 3
    assert outcome.usage.prompt_tokens == len(server.requests) * 1000  # spending survives the restart
    # resuming a finished run asks nothing and returns the same winner; extending it runs one more round
    again = resume(run_dir, StandIn(), ScriptedModel([]))
    assert again.winner.round == 3
    more = resume(run_dir, StandIn(), ScriptedModel([PLAN, kernel("speedup=1.6"), SUMMARY], name="o4-mini"), rounds=4)
    assert more.winner.round == 4


def test_single_agent_mode(fake, tmp_path):
    answer = '```json\n{"shapes": [[9, 100]]}\n```\nPlan: vectorize.\n' + kernel("speedup=1.25")
    server = fake({"single": [answer, kernel("wrong")]})
    evaluator = StandIn()
    outcome = run(run_config(single_agent=True), tmp_path / "r", evaluator, OpenAIModel(llm_config(server)))
    assert server.roles() == ["single", "single"]
    assert (9, 100) not in evaluator.calls[0].shapes and (9, 100) in evaluator.calls[1].shapes
    assert outcome.winner.round == 1
    code = RunLog(tmp_path / "r").find(1, "code", "c0a0").payload
    assert "vectorize" in code["plan"]


def test_compile_only_has_no_winner(tmp_path):
    model = ScriptedModel([TESTS, PLAN, kernel("speedup=1.3")], name="o4-mini")
    outcome = run(run_config(rounds=1, compile_only=True), tmp_path / "r", StandIn(), model)
    assert outcome.winner is None and rounds(tmp_path / "r")[1]["status"] == "compiled"
    assert "Compile-only run" in (tmp_path / "r" / "report.md").read_text()
