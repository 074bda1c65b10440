"""Nsight Compute for the agents, on committed outputs of ncu's layouts (fixtures/ncu): the bottleneck read from
them, more metrics than a fixed handful chosen by relevance to it, the source page's hotspots, before/after
changes, the shapes a profile covers, and the profiler's command."""
from pathlib import Path

import pytest
from agent_support import NCU

from astra_sglang.harness.ncu import ProfileFacts
from astra_sglang.harness.ncu_csv import attribute, parse_ncu_launches
from astra_sglang.harness.records import EvalResult, ShapeResult, Timing
from astra_sglang.optimize.agents.bottleneck import from_ncu
from astra_sglang.optimize.agents.database import Entry
from astra_sglang.optimize.agents.ncu_deep import CandidateProfile, DeepProfiler, parse_source_page
from astra_sglang.optimize.agents.profiling import choose_metrics, metric_changes, pick_shapes


@pytest.fixture(scope="module")
def shapes():
    per_shape, problem = attribute(parse_ncu_launches((NCU / "details.csv").read_text()), 2)
    assert problem is None
    return per_shape


def test_bottleneck_from_the_committed_ncu_csv(shapes):
    small = from_ncu(ProfileFacts(ncu={**shapes[0], "profiled shape 64x14336 bfloat16": 1.0}))
    large = from_ncu(ProfileFacts(ncu={**shapes[1], "profiled shape 8192x14336 bfloat16": 1.0}))
    assert (small.kind, small.shape) == ("occupancy", "64x14336 bfloat16")
    assert small.occupancy_pct == pytest.approx(23.41) and small.theoretical_occupancy_pct == 100
    assert large.kind == "memory" and large.dram_pct == pytest.approx(91.2) and large.sm_pct == pytest.approx(18.07)
    assert large.stalls == pytest.approx({"long_scoreboard": 83.02, "short_scoreboard": 0.38, "barrier": 0.0,
                                          "wait": 3.11})
    assert any("waiting on global-memory loads" in line for line in large.evidence)


def test_more_than_sixteen_metrics_ranked_by_the_bottleneck(shapes):
    memory = [name for name, _ in choose_metrics(shapes[1], "memory", 32)]
    latency = [name for name, _ in choose_metrics(shapes[1], "latency", 32)]
    assert len(memory) == 32 > 16 and len(shapes[1]) > 32
    assert memory[0].endswith("DRAM Throughput (%)") or "Duration" in memory[0]  # the few every reading needs first
    first_kind = memory[6:16]  # after the six every reading needs: the memory sections'
    assert any("L2 Hit Rate" in n for n in first_kind) and not any("Eligible" in n for n in first_kind)
    assert any("No Eligible" in n for n in latency[6:16]) and any("stalled_long_scoreboard" in n for n in latency[6:16])
    assert not any("stalled_" in n for n in memory[:16])  # where latency binds, the stalls come first
    assert not any(n.endswith("Bottleneck") for n in memory)  # text values never reach a prompt


def test_hotspots_from_the_source_page():
    spots = parse_source_page((NCU / "source.csv").read_text())
    assert spots[0].where.startswith("PRMT R12, R4, 0x7632") and spots[0].share == pytest.approx(100 * 212 / 429)
    assert spots[0].reason == "stall_long_sb" and spots[1].where.startswith("LDG.E.128.CONSTANT R4")
    assert len(spots) == 6 and parse_source_page("==PROF== no kernels were profiled\n") == []


def test_metric_changes_before_after(shapes):
    after = {**shapes[1], "GPU Speed Of Light Throughput: DRAM Throughput (%)": 70.0}
    moved = metric_changes(shapes[1], after, "memory")
    assert moved == ["GPU Speed Of Light Throughput: DRAM Throughput (%): 91.2 -> 70"]
    across = metric_changes(shapes[0], shapes[1], "memory", limit=40)
    assert "GPU Speed Of Light Throughput: DRAM Throughput (%): 48.31 -> 91.2" in across[:6]
    assert not any("Registers Per Thread" in line for line in across)  # what did not move is not listed


def test_a_profile_covers_the_shapes_that_matter():
    def row(shape, us, parent_us, floor):
        return ShapeResult(shape=shape, dtype="bfloat16", correct=True, speedup=10.0 / us, min_bytes=shape[0],
                           candidate=Timing(median_us=us, p10_us=us, p90_us=us), floor_us=floor)

    result = EvalResult(kernel="silu_and_mul", candidate="c", ok=True, stage="done",
                        shapes=[row((1, 128), 5.0, 0, 1.0), row((64, 4096), 9.0, 0, 8.0),
                                row((512, 4096), 8.0, 0, 7.9)])
    parent = Entry(id="r01-c0-a0", round=1, source="", status="ok", speedup=1.5,
                   shapes={"1x128/bfloat16": 2.0, "64x4096/bfloat16": 1.0, "512x4096/bfloat16": 1.6})
    chosen = pick_shapes(result, parent, 2)
    assert chosen == [((1, 128), "bfloat16"), ((512, 4096), "bfloat16")]  # furthest from the floor, lost most
    before = pick_shapes(result, parent, 2, also=["64x4096/bfloat16", "512x4096/bfloat16"])  # the parent's first
    assert before == [((64, 4096), "bfloat16"), ((512, 4096), "bfloat16"), ((1, 128), "bfloat16")]


def test_the_profilers_command_and_an_empty_profile(tmp_path):
    cmd = DeepProfiler("silu_and_mul", ncu="ncu").export_command(Path("req.json"), Path("r.ncu-rep"))
    assert cmd[cmd.index("--export") + 1] == "r.ncu-rep" and cmd[cmd.index("--import-source") + 1] == "yes"
    sections = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--section"]
    assert {"SpeedOfLight", "WarpStateStats", "SourceCounters", "SchedulerStats"} <= set(sections)
    assert CandidateProfile().facts().ncu == {}
    facts = CandidateProfile(shapes={"8x64/bfloat16": {"a": 1.0}}).facts().ncu
    assert facts == {"a": 1.0, "profiled shape 8x64 bfloat16": 1.0}
