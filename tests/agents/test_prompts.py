"""What each prompt carries, read from the scripted model's recorded requests: the coder sees the parent's
profile, bottleneck and hotspots, how the metrics moved from the parent to its best child and the failures
already seen on it, after a static prefix every coder request shares (prompt caching) and with the device
helpers as declarations; the planner sees every plan whole with each candidate's turns and the reflector's
lesson, and what earlier runs learned."""
import json

import pytest

from agent_support import REFLECTION, FixtureProfiler, StandIn, fixed_answer, kernel, run_config

from astra_sglang.optimize.agents.loop import run
from astra_sglang.optimize.agents.prompts import device_digest, device_header
from astra_sglang.optimize.agents.scripted import ScriptedModel

LONG_PLAN = ("1. Load the gate and up halves with one 16-byte access each (8 bf16 lanes), keeping a scalar tail "
             "for widths that are not a multiple of 8.\n2. Compute the activation in fp32 registers with __expf "
             "and __fdividef.\n3. Launch 256 threads per block and one block per row up to 64 rows, a grid-stride "
             "loop above that.\n4. Store with one 16-byte access per 8 outputs.")
SECOND = "1. Process two rows per block at the small shapes so that fewer blocks are launched."


def script(answers):
    """role -> answer, the planner's and the coder's in order."""
    def answer(messages):
        if (fixed := fixed_answer(messages)) is not None:
            return fixed
        role = "planning" if "PlanningAgent" in messages[0].content[:300] else "coding"
        return answers[role].pop(0)
    return answer


def plans_json(*items):
    return "```json\n" + json.dumps({"plans": [{"parent": p, "key": k, "plan": t} for p, k, t in items]}) + "\n```"


def test_the_coders_and_the_planners_prompts(tmp_path):
    answers = {"planning": [plans_json(("r00", "vector-16b", LONG_PLAN)), plans_json(("r00", "two-rows", SECOND))],
               "coding": [kernel("speedup=1.2", "// MARK dram=83\n"), kernel("build_fail"), kernel("speedup=1.1"),
                          kernel("speedup=1.05")]}
    model = ScriptedModel(script(answers), name="o4-mini")
    config = run_config(population=2, plans=1, rounds=2, reflect=True, ncu_share=1e9)
    run(config, tmp_path / "r", StandIn(library=True), model, profiler=FixtureProfiler())
    coder = [m for m in model.calls if "CodingAgent" in m[0].content]
    planner = [m[-1].content for m in model.calls if "PlanningAgent" in m[0].content]
    first, second = coder[0], coder[1]
    text = second[-1].content
    # the parent's profile, bottleneck and hotspots
    assert "Profile of the parent:\n- geomean speedup vs baseline" in text and "Bottleneck of the parent" in text
    assert "ncu Occupancy: Achieved Occupancy (%) = " in text  # more than the 16 metrics the planner once saw
    assert "Where warps stall (ncu source page, share of stall samples):\n- 49% PRMT R12, R4, 0x7632, R12" in text
    # how the metrics moved from this parent to its best child, and what already failed on it
    assert "What the last change from this parent did to the hardware (r01-c0-a0 at " in text
    assert "GPU Speed Of Light Throughput: DRAM Throughput (%): 48.31 -> 83" in text
    assert "Already tried on this parent and failed" in text and "- r01-c1-a0: build (nvcc failed)" in text
    assert SECOND in text and "Plan to implement (round 2 of 2)" in text
    # a static prefix every coder request shares (system message, and the user message up to the parent)
    assert first[0].content == second[0].content
    head = first[1].content.split("Parent kernel (")[0]
    assert len(head) > 8000 and second[1].content.startswith(head)
    assert "ld.global.nc.v4.u32" not in head and "load_ro(const T* p) { ... }" in head  # declarations only
    # the planner's static prefix (its system message, the op, the GPU, the shapes timed) comes first too
    systems = [m[0].content for m in model.calls if "PlanningAgent" in m[0].content]
    head = planner[0][:planner[0].index("\n", planner[0].index("Shapes timed"))]
    assert systems[0] == systems[1] and len(head) > 500 and planner[1].startswith(head)
    assert planner[0][len(head):] != planner[1][len(head):]  # what changes comes after it
    # the planner: every plan whole, each candidate turn by turn with its lesson
    later = planner[1]
    assert LONG_PLAN.replace("\n", "\n  ") in later and "[vector-16b]" in later
    assert "turns: r01-c1-a0 draft: build (nvcc failed)" in later and f"lesson: {REFLECTION}" in later
    assert "Where warps stall" in later


@pytest.mark.parametrize("reflect", [True, False])
def test_lessons_reach_the_next_runs_planner(tmp_path, monkeypatch, reflect):
    """A lineage that produced a correct kernel leaves a lesson, with the reflector's reading where it ran."""
    monkeypatch.setenv("ASTRA_SGLANG_HOME", str(tmp_path / "home"))  # a lesson store of this test's own
    answers = {"planning": [plans_json(("r00", "vector-16b", LONG_PLAN))], "coding": [kernel("speedup=1.2")]}
    config = run_config(rounds=1, reflect=reflect, memory=True)
    run(config, tmp_path / "a", StandIn(), ScriptedModel(script(answers), name="o4-mini"))
    answers = {"planning": [plans_json(("r00", "two-rows", SECOND))], "coding": [kernel("speedup=1.1")]}
    again = ScriptedModel(script(answers), name="o4-mini")
    run(config, tmp_path / "b", StandIn(), again)
    planner = next(m[-1].content for m in again.calls if "PlanningAgent" in m[0].content)
    assert "Lessons from earlier runs (op, GPU arch: the change, its gain over the kernel it started from):" in planner
    assert "- silu_and_mul (gated activation), sm_90: 1.20x: 1. Load the gate and up halves" in planner
    assert (f"-- {REFLECTION[:40]}" in planner) == reflect


def test_the_device_helpers_as_declarations_cost_fewer_tokens():
    full, digest = device_header(), device_digest()
    assert len(full) // 4 - len(digest) // 4 > 1000  # tokens, 4 characters each
    for name in ("load_ro", "store", "row_sum", "launch", "by_dtype", "warp_sum", "pdl_wait", "Silu"):
        assert name in digest  # everything a kernel may call is still named
