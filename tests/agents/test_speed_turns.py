"""Speed feedback inside a lineage: a correct candidate slower than its parent, or far from the floor, goes back to
its coder with its per-shape timings against the parent's and the floor, and the metrics that moved, for up to
`speed_turns` more turns; the lineage's result is its best attempt; a resumed run asks nothing twice."""
import pytest
from agent_support import FixtureProfiler, StandIn, fixed_answer, kernel, run_config

from astra_sglang.harness.records import EvalResult, ShapeResult, Timing
from astra_sglang.optimize.agents.database import Entry, entry_from
from astra_sglang.optimize.agents.feedback import ShapeRow, shape_rows, speed_message, why_slow
from astra_sglang.optimize.agents.journal import RunLog
from astra_sglang.optimize.agents.loop import run
from astra_sglang.optimize.agents.ncu_deep import Hotspot
from astra_sglang.optimize.agents.profiling import pick_shapes
from astra_sglang.optimize.agents.scripted import ScriptedModel

PLAN = "1. Vectorize the loads with 16-byte accesses and keep a scalar tail."


class Coder:
    """The planner's one plan; the coder's answers in order; every other role its fixed answer."""

    def __init__(self, *answers):
        self.answers, self.turns = list(answers), []

    def __call__(self, messages):
        if (fixed := fixed_answer(messages)) is not None:
            return fixed
        if "PlanningAgent" in messages[0].content[:300]:
            return PLAN
        if len(messages) > 2:
            self.turns.append(messages[-1].content)
        return self.answers.pop(0)


def test_a_slower_then_far_candidate_gets_speed_turns(tmp_path):
    coder = Coder(kernel("speedup=0.9", "// MARK dram=40\n"), kernel("speedup=1.1"), kernel("speedup=2.5"))
    config = run_config(rounds=1, speed_turns=2, repairs=1, ncu_share=1e9)
    outcome = run(config, tmp_path / "r", StandIn(library=True), ScriptedModel(coder, name="o4-mini"),
                  profiler=FixtureProfiler())
    slower, far = coder.turns
    assert slower.startswith("Candidate r01-c0-a0 is correct (0.900x the baseline), but it is slower than its parent "
                             "r00 (0.900x against 1.000x).")
    assert "| shape | dtype | this us | parent us | vs parent | floor us | x the floor |" in slower
    assert "| 1x14336 | bfloat16 | 11.11 | 10.00 | 0.90x |" in slower  # this candidate's time against the parent's
    assert "Nsight Compute, parent -> this candidate at " in slower
    assert "GPU Speed Of Light Throughput: DRAM Throughput (%): 48.31 -> 40" in slower
    assert "Where its warps stall" in slower and "(1 more speed turn(s) after this one)" in slower
    assert "far from the floor at 6 shape(s) (worst " in far and "more than 1.30x)" in far
    assert "(0 more speed turn(s) after this one)" in far
    cand = RunLog(tmp_path / "r").find(1, "cand", "c0").payload
    assert cand["id"] == "r01-c0-a2" and cand["attempts"] == 3 and cand["speedup"] == pytest.approx(2.5)
    assert outcome.winner.candidate == "r01-c0-a2"
    again = ScriptedModel(Coder(), name="o4-mini")  # a resumed run: every turn is in the log
    assert run(config, tmp_path / "r", StandIn(library=True), again).winner.candidate == "r01-c0-a2"
    assert again.calls == []


def test_speed_turns_are_bounded_and_the_best_attempt_stays(tmp_path):
    coder = Coder(kernel("speedup=1.2"), kernel("speedup=1.05"))  # the turn made it worse
    outcome = run(run_config(rounds=1, speed_turns=1), tmp_path / "r", StandIn(), ScriptedModel(coder, name="o4-mini"))
    assert len(coder.turns) == 1 and "far from the floor" in coder.turns[0]  # 1.2x: 2.08x the floor
    cand = RunLog(tmp_path / "r").find(1, "cand", "c0").payload
    assert cand["id"] == "r01-c0-a0" and cand["attempts"] == 2 and outcome.winner.candidate == "r01-c0-a0"


def test_a_failed_speed_turn_is_repaired_and_a_kernel_at_the_floor_ends_the_lineage(tmp_path):
    coder = Coder(kernel("speedup=1.2"), kernel("build_fail"), kernel("speedup=2.5"))
    run(run_config(rounds=1, speed_turns=1, repairs=1), tmp_path / "r", StandIn(), ScriptedModel(coder, name="o4-mini"))
    assert "far from the floor" in coder.turns[0] and "does not compile" in coder.turns[1]
    attempts = [r.key for r in RunLog(tmp_path / "r").of_role("code")]
    assert attempts == ["c0a0", "c0a1", "c0a2"]  # draft, speed turn, repair: the repaired kernel is at the floor


def _result(**row) -> EvalResult:
    timing = Timing(median_us=4.0, p10_us=3.9, p90_us=4.1)
    return EvalResult(kernel="silu_and_mul", candidate="c", ok=True, stage="done", shapes=[ShapeResult(
        shape=(7, 130), dtype="bfloat16", correct=True, candidate=timing, baseline=timing, speedup=1.0, **row)])


@pytest.mark.parametrize("row, over", [
    (dict(floor_us=1.6, pct_roofline=50.0), 2.5),  # over the harness's floor
    (dict(pct_roofline=40.0), 2.5),  # a result recorded without a floor: from its share of the roofline
    (dict(), None),
])
def test_the_speed_table_shows_the_headroom_the_turn_is_sent_for(row, over):
    """The 'x the floor' of a speed turn's table is the figure the turn's reason cites (the entry's)."""
    result = _result(**row)
    entry = entry_from("r01-c0-a0", 1, "", "src", result)
    rows = shape_rows(result, None, None)
    assert entry.headroom.get("7x130/bfloat16") == rows[0].headroom == (pytest.approx(over) if over else None)
    reason = why_slow(entry, None, run_config())
    assert ("worst 7x130/bfloat16: 2.50x the floor" in reason) == (over is not None)
    assert pick_shapes(result, None, 1) == [((7, 130), "bfloat16")]


def test_the_speed_prompt_lists_where_the_warps_stall():
    """The stall lines of a speed turn, as the speed template wrote them before it shared _context.j2's macro."""
    entry = Entry(id="r02-c1-a1", round=2, source="", status="ok", speedup=1.2)
    parent = Entry(id="r01-c0-a0", round=1, source="", status="ok", speedup=1.3)
    rows = [ShapeRow(shape="7x130", dtype="float16", us=2.0)]
    hot = [Hotspot(where="line 12: ld.global", share=41.6, reason="long_scoreboard"), Hotspot(where="line 30", share=9.4)]
    text = speed_message(entry, parent, "it is slow", rows, 2, hotspots=hot)[-1].content
    assert ("| 7x130 | float16 | 2.00 | - | - | - | - |\n\nWhere its warps stall (share of stall samples):\n"
            "- 42% line 12: ld.global (long_scoreboard)\n- 9% line 30\n\nMake it faster where it lost") in text
    assert "Where its warps stall" not in speed_message(entry, parent, "it is slow", rows, 2)[-1].content
