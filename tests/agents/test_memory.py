"""The planner's memory: repeated plans detected (by the planner's key and by their words) and left out or sent
back; the oldest plans folded into a digest once the story is long (memoized: a resumed run asks nothing); the
lesson store across runs; the kind of an op."""
import json

import pytest
from agent_support import DIGEST, StandIn, fixed_answer, kernel, plans, run_config

from astra_sglang.optimize.agents.journal import RunLog
from astra_sglang.optimize.agents import loop, memory
from astra_sglang.optimize.agents.loop import run
from astra_sglang.optimize.agents.memory import Outcome, PastPlan, find_repeat, past_plans, similarity
from astra_sglang.optimize.agents.database import Entry
from astra_sglang.optimize.agents.scripted import ScriptedModel
from astra_sglang.optimize.agents.store import Lesson, LessonStore, op_kind
from astra_sglang.optimize.records import PlanItem
from astra_sglang.specs.registry import get_spec

VECTOR = "1. Vectorize the loads and stores with 16-byte accesses, scalar tail for odd widths."
REWORDED = "1. Vectorize loads and stores with 16-byte accesses and a scalar tail for odd widths."
ROWS = "1. Process two rows per block at the small shapes to launch fewer blocks."


def earlier(parent="r00", key="vector-16b", text=VECTOR, outcome=""):
    best = Entry(id=f"{outcome}-a0" if outcome else "r01-c0-a0", round=1, source="", status="ok")
    return PastPlan(round=1, index=0, parent=parent, text=text, key=key,
                    outcomes=[Outcome(slot=outcome, best=best)] if outcome else [])


@pytest.mark.parametrize("item, repeats", [
    (PlanItem(parent="r00", text=ROWS, key="vector-16b"), True),  # the planner's own key, same parent
    (PlanItem(parent="r00", text=REWORDED), True),  # the same words, reordered a little
    (PlanItem(parent="r00", text=ROWS), False),
    (PlanItem(parent="r01-c0-a0", text=VECTOR), True),  # on the kernel that plan produced: already in it
    (PlanItem(parent="r02-c1-a0", text=REWORDED), False),  # the idea on an unrelated kernel
])
def test_repeats(item, repeats):
    found = find_repeat(item, [earlier(outcome="r01-c0")])
    assert (found is not None) == repeats
    assert similarity(VECTOR, REWORDED) > 0.6 > similarity(VECTOR, ROWS)


class Planner:
    """A scripted run whose planner answers `plans` in order; other roles answer as usual."""

    def __init__(self, plans, coding=None):
        self.plans, self.coding, self.prompts = list(plans), coding or kernel("speedup=1.1"), []

    def __call__(self, messages):
        if (fixed := fixed_answer(messages)) is not None:
            return fixed
        if "PlanningAgent" in messages[0].content[:300]:
            self.prompts.append(messages[-1].content)
            return self.plans.pop(0)
        return self.coding


def as_json(*items):
    return "```json\n" + json.dumps({"plans": [{"parent": "r00", "key": k, "plan": t} for k, t in items]}) + "\n```"


def test_a_repeated_plan_is_left_out_and_all_repeats_go_back(tmp_path):
    planner = Planner([as_json(("vector-16b", VECTOR)),
                       as_json(("vector", REWORDED)),  # only a repeat: sent back with the earlier plan named
                       as_json(("vector-16b", VECTOR), ("two-rows", ROWS))],
                      coding=kernel("wrong"))  # the parent stays r00
    run(run_config(rounds=2, plans=2, population=2), tmp_path / "r", StandIn(), ScriptedModel(planner, name="o4-mini"))
    log = RunLog(tmp_path / "r")
    second = log.find(2, "plan")
    assert [p["text"] for p in second.payload["plans"]] == [ROWS]
    assert second.payload["dropped"] == ["'vector-16b' on r00 repeats round 1 plan 0 on r00"]
    retry = json.loads(log.load_transcript(2, "plan").model_dump_json())["messages"]
    assert "every plan repeats an earlier one ('vector' on r00 repeats round 1 plan 0 on r00)" in retry[-2]["content"]


def test_a_planner_reads_the_past_plans_once(tmp_path, monkeypatch):
    """The planner's view and its repeat check read one list of the past plans."""
    read = []
    for module in (loop, memory):
        monkeypatch.setattr(module, "past_plans", lambda log, db: read.append(1) or past_plans(log, db))
    planner = Planner([as_json(("vector-16b", VECTOR)), as_json(("two-rows", ROWS))])
    run(run_config(rounds=2), tmp_path / "r", StandIn(), ScriptedModel(planner, name="o4-mini"))
    assert len(planner.prompts) == 2 and len(read) == 2

def test_a_long_story_is_folded_into_a_digest_once(tmp_path):
    ideas = ["1. Unroll the column loop by four.", "1. Launch 128 threads per block.",
             "1. Keep the gate lanes in packed registers.", "1. Use a grid-stride loop over rows."]
    planner = Planner([as_json((f"k{i}", t)) for i, t in enumerate(ideas)])
    config = run_config(rounds=4, memory_chars=700, max_rounds=4)
    model = ScriptedModel(planner, name="o4-mini")
    run(config, tmp_path / "r", StandIn(), model)
    digests = RunLog(tmp_path / "r").of_role("digest")
    assert digests and all(d.payload["text"] == DIGEST for d in digests)
    last = planner.prompts[-1]
    assert f"Digest of the earliest plans:\n{DIGEST}" in last and ideas[2] in last
    assert ideas[0] not in last  # folded into the digest
    asked = len(model.calls)
    again = ScriptedModel(Planner([]), name="o4-mini")
    run(config, tmp_path / "r", StandIn(), again)
    assert again.calls == [] and asked > 0


def test_a_digest_is_reused_while_the_rest_fits(tmp_path):
    """Each fold leaves the rest at half the budget, so later planners reuse the digest until the story outgrows
    the budget again: fewer digests are written than planners read one."""
    planner = Planner([as_json((f"k{i}", t)) for i, t in enumerate(plans(8))])
    run(run_config(rounds=8, memory_chars=700, max_rounds=8), tmp_path / "r", StandIn(),
        ScriptedModel(planner, name="o4-mini"))
    digests = RunLog(tmp_path / "r").of_role("digest")
    read = [p for p in planner.prompts if "Digest of the earliest plans" in p]
    assert len(read) >= 4 and len(digests) <= len(read) - 2
    first = planner.prompts.index(read[0])
    assert len(read) == len(planner.prompts) - first  # once folded, every later planner reads a digest


def test_the_lesson_store(tmp_path):
    store = LessonStore(tmp_path / "memory.jsonl")
    base = dict(kind="norm", gpu="H100", arch="sm_90", parent_speedup=1.0, run="a")

    def lesson(op, plan, gain, arch="sm_90", run="a", candidate=""):
        return Lesson(**{**base, "op": op, "plan": plan, "speedup": gain, "gain": gain, "arch": arch, "run": run,
                         "candidate": candidate or plan})

    for x in (lesson("rmsnorm", "warp reduce", 1.3), lesson("rmsnorm", "smem tree", 0.8),
              lesson("fused_add_rmsnorm", "vector loads", 1.5), lesson("rmsnorm", "two rows", 1.1, arch="sm_80"),
              lesson("rmsnorm", "warp reduce", 1.3)):  # the same run and candidate: written once
        store.add(x)
    assert len(store.read()) == 4
    chosen = store.relevant("rmsnorm", "norm", "sm_90")
    assert [x.plan for x in chosen] == ["warp reduce", "smem tree", "vector loads", "two rows"]
    assert store.relevant("rmsnorm", "norm", "sm_90", exclude_run="a") == []
    (tmp_path / "memory.jsonl").write_text((tmp_path / "memory.jsonl").read_text() + '{"op": "torn')
    assert len(store.read()) == 4  # a line torn by a kill is skipped
    kinds = {op: op_kind(get_spec(op)) for op in ("rmsnorm", "silu_and_mul", "merge_attn_states_lse")}
    assert kinds == {"rmsnorm": "norm", "silu_and_mul": "gated activation", "merge_attn_states_lse": "attention"}
