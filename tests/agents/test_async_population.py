"""The asynchronous population over a fake pool (the Pool protocol, GPU slots that take time): rounds overlap (no
barrier), islands take turns and migrate, a plateau stops the run, a late new best extends the rounds budget, and
a run killed with rounds in flight resumes where it stopped."""
import pytest
from agent_support import FakePool, Killed, StandIn, fixed_answer, kernel, plans, run_config

from astra_sglang.optimize.agents.journal import RunLog
from astra_sglang.optimize.agents.loop import resume, run
from astra_sglang.optimize.agents.scripted import ScriptedModel


class Roles:
    """Fresh plans (never repeats) on the first parent offered, the coder's answers in order (the last one
    repeated), fixed answers for the other roles."""

    def __init__(self, *kernels):
        self.kernels, self.planned = list(kernels), 0

    def __call__(self, messages):
        if (fixed := fixed_answer(messages)) is not None:
            return fixed
        if "PlanningAgent" in messages[0].content[:300]:
            self.planned += 1
            return plans(self.planned)[-1]
        return self.kernels.pop(0) if len(self.kernels) > 1 else self.kernels[0]


def order(log: RunLog, round: int, role: str) -> int:
    return next(i for i, r in enumerate(log.records) if r.round == round and r.role == role)


def test_rounds_overlap_on_islands_that_migrate(tmp_path):
    roles = Roles(*(kernel(f"speedup={1 + i / 100}") for i in range(1, 40)))
    config = run_config(rounds=6, max_rounds=6, population=2, islands=2, migrate_every=2, inflight=None)
    pool = FakePool(gpus=1, seconds=0.3)
    outcome = run(config, tmp_path / "r", pool, ScriptedModel(roles, name="o4-mini", latency_s=0.2))
    log = RunLog(tmp_path / "r")
    assert sorted(r.round for r in log.of_role("round")) == [0, 1, 2, 3, 4, 5, 6] and outcome.winner is not None
    assert order(log, 2, "plan") < order(log, 1, "round")  # round 2 was planned while round 1 was still measured
    islands = {r.round: r.payload["island"] for r in log.of_role("plan")}
    assert islands == {1: 0, 2: 1, 3: 0, 4: 1, 5: 0, 6: 1}
    entries = {(r.round, r.key): r.payload["island"] for r in log.of_role("code")}
    assert set(entries.values()) == {0, 1}
    migrated = [r for r in log.of_role("plan") if r.round % 2 == 0 and r.payload["migrants"]]
    assert migrated, "a migration round offers the other island's best kernel"
    plan = log.load_transcript(migrated[0].round, "plan").messages[-2].content
    assert "migrated from the other islands and may be a parent too" in plan
    pool.close()


def test_a_plateau_stops_the_run(tmp_path):
    config = run_config(rounds=20, max_rounds=20, plateau=3)
    outcome = run(config, tmp_path / "r", StandIn(), ScriptedModel(Roles(kernel("speedup=1.0")), name="o4-mini"))
    assert outcome.stop_reason == "plateau: 3 rounds in a row without a 1% gain (best 1.000x)"
    assert outcome.rounds_done == 3


def test_a_late_new_best_extends_the_rounds(tmp_path):
    lines = []
    roles = Roles(kernel("speedup=1.1"), kernel("speedup=1.1"), kernel("speedup=1.1"), kernel("speedup=1.3"),
                  kernel("speedup=1.3"))
    outcome = run(run_config(rounds=4, max_rounds=8), tmp_path / "r", StandIn(), ScriptedModel(roles, name="o4-mini"),
                  echo=lines.append)
    assert outcome.rounds_done == 5 and outcome.winner.speedup == pytest.approx(1.3)
    assert "new best late in the run (r04-c0-a0, 1.300x): 5 rounds now" in lines


def test_a_run_killed_with_rounds_in_flight_resumes(tmp_path):
    answers = [kernel("speedup=1.1"), kernel("speedup=1.2", "// MARK kill\n"), kernel("speedup=1.3")] + \
        [kernel(f"speedup={1.3 + i / 100}") for i in range(1, 20)]
    config = run_config(rounds=4, max_rounds=4, population=1, islands=2, inflight=None)
    first = ScriptedModel(Roles(*answers), name="o4-mini", latency_s=0.1)
    with pytest.raises(Killed):
        run(config, tmp_path / "r", FakePool(seconds=0.2, evaluator=StandIn(kill_on="kill")), first)
    log = RunLog(tmp_path / "r")
    cut = {r.round for r in log.of_role("plan")} - {r.round for r in log.of_role("round")}
    assert cut, "the kill left a round unfinished"
    again = ScriptedModel(Roles(kernel("speedup=1.4")), name="o4-mini")
    outcome = resume(tmp_path / "r", FakePool(seconds=0.01), again)
    closed = sorted(r.round for r in RunLog(tmp_path / "r").of_role("round"))
    assert closed == [0, 1, 2, 3, 4] and outcome.winner is not None
    assert not any(tag.endswith("planning") and int(tag[1:3]) in cut for tag in again.tags)  # answered ones not asked


def test_a_deadline_ends_each_part_of_a_run_cleanly(tmp_path):
    """deadline_s: the rounds stop cleanly after that long, and a resumed run gets as long again (the GPU
    script's two calls)."""
    config = run_config(rounds=500, max_rounds=500, deadline_s=1.0)
    model = ScriptedModel(Roles(kernel("speedup=1.0")), name="o4-mini", latency_s=0.1)
    first = run(config, tmp_path / "r", StandIn(), model)
    assert first.stop_reason == "time is up: the rounds' deadline passed" and 1 <= first.rounds_done < 500
    again = resume(tmp_path / "r", StandIn(), ScriptedModel(Roles(kernel("speedup=1.0")), name="o4-mini",
                                                             latency_s=0.1))
    assert again.stop_reason == first.stop_reason and again.rounds_done > first.rounds_done


@pytest.mark.parametrize("active, drafting, pending, plan", [
    (0, 0, 0, True),  # nothing in flight: plan at once
    (3, 0, 2, True),  # short of the target (6 at 30 s a model turn, 12 s an evaluation, one GPU)
    (6, 0, 2, False),  # at the target
    (2, 1, 2, True),  # 2 + half of a round of 4 coming: short
    (4, 1, 2, False),  # 4 + 2: at the target (counting all of the round coming would overshoot: 8 > 6)
    (4, 1, 0, False),  # a GPU about to idle, but a round is being planned already
    (6, 0, 0, True),  # a GPU about to idle and none being planned: plan beyond the target
    (0, 2, 0, False),  # as many rounds being planned as islands
])
def test_when_a_round_is_planned(active, drafting, pending, plan):
    """Little's law over the measured latencies: 1.5 x G x (L + E) / E lineages in flight, counting half of the
    drafts of the rounds being planned (they come two model calls later, when as many lineages have ended)."""
    from types import SimpleNamespace

    from astra_sglang.optimize.agents.population import Population
    from astra_sglang.optimize.pool.stats import PoolStats, Span

    stats = PoolStats(lanes=["0"], evaluations=[Span(lane="0", start=0, end=12)])
    pool = SimpleNamespace(gpus=["0"], stats=lambda: stats, pending=lambda: pending)
    opt = SimpleNamespace(config=run_config(population=4, islands=2, inflight=None), pool=pool,
                          db=SimpleNamespace(best=lambda: None), active=active, drafting=drafting,
                          models=SimpleNamespace(meter=SimpleNamespace(mean_seconds=lambda: 30.0)))
    population = Population(opt)
    assert population.target() == 6 and population.should_plan() == plan
