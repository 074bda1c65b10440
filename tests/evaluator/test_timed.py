"""The timed launches on CPU (harness/timed.py, timed_run.py): graphs are recorded thunks (tests/evaluator/
fakegraph.py), replayed after the same preparation as on a GPU, and checked as the replay left them."""
import random

import pytest
import torch

from astra_sglang.harness import draw
from astra_sglang.harness.arena import Arena
from astra_sglang.harness.timed import TimedSets
from astra_sglang.harness.timed_run import CHECK_TAIL, EAGER_ROUND, TimedRun
from astra_sglang.harness.timing import MAX_LAUNCHES, MIN_REPLAY_US, plan_sets
from astra_sglang.specs.registry import get_spec
from tests.evaluator import fakegraph, runners


def _sets(device, op="silu_and_mul", shape=(4, 64), count=7, hot=False, seed=11, dtype="bfloat16"):
    spec = get_spec(op)
    shared = frozenset(i for i, a in enumerate(spec.tensor_args) if a.role == "in") if hot else frozenset()
    return TimedSets(Arena(spec, shape, dtype, device, count, shared), seed=seed)


def _run(device, runner, seed=5, **kw):
    sets = _sets(device, **kw)
    run = TimedRun(sets, {"candidate": lambda i: runner(sets.arena.args(i))}, random.Random(seed),
                   capture=fakegraph.Capture.__call__.__get__(fakegraph.CAPTURE), replay=fakegraph.replay)
    return run


def _graphs(run):
    return run.graphs(replays=2, warmup=1, warmup_s=0.0)


@pytest.fixture
def device(cpu_cuda, monkeypatch):
    monkeypatch.setattr(torch.cuda, "synchronize", fakegraph.drain)
    fakegraph.PENDING.clear()
    return cpu_cuda


@pytest.mark.parametrize("count", [2, 3, 9])
@pytest.mark.parametrize("hot", [False, True])
def test_honest_launches_pass_graphs_and_eager(device, count, hot):
    run = _run(device, fakegraph.graphed(runners.silu), count=count, hot=hot)
    samples, wrong = _graphs(run)
    assert wrong == "" and len(samples["candidate"]) == 4  # 2 recorded + the 2 checked rounds
    us, wrong = run.eager("candidate", check=True)
    assert wrong == "" and us > 0


def test_two_graphs_launch_every_set_in_random_orders(device):
    run = _run(device, fakegraph.graphed(runners.silu), count=9)
    a, b = run.orders
    assert sorted(a) == list(range(8)) and sorted(b) == list(range(9))
    assert a != list(range(8)) or b != list(range(9))  # (with this seed) not the allocation order


@pytest.mark.parametrize("runner, reason", [
    (fakegraph.capture_noop, "never written"),
    (fakegraph.capture_time_result, "out: "),
])
def test_work_done_outside_the_replays_fails(device, runner, reason):
    _samples, wrong = _graphs(_run(device, runner))
    assert wrong.startswith("the timed graph, launch ") and reason in wrong, wrong


@pytest.mark.parametrize("k", [2, 3, 4, 7])
@pytest.mark.parametrize("count", [5, 8, 13])
def test_batching_launches_leaves_the_last_ones_undone_in_one_of_the_graphs(device, k, count):
    _samples, wrong = _graphs(_run(device, fakegraph.batches_of(k), count=count))
    assert wrong.startswith("the timed graph, launch "), wrong


def test_a_cache_made_in_the_first_replay_fails_in_a_later_one(device):
    _samples, wrong = _graphs(_run(device, fakegraph.pointer_cache()))
    assert wrong.startswith("the timed graph, launch ") and "out: " in wrong, wrong


def test_work_left_running_after_the_replay_is_found_by_its_fingerprints(device):
    _samples, wrong = _graphs(_run(device, fakegraph.background))
    assert "changed after the timed launches ended on the stream" in wrong, wrong


def test_eager_calls_are_checked_as_their_last_round_left_them(device):
    def skips_after(limit):
        calls = [0]

        def launch(args):
            calls[0] += 1
            return 0 if calls[0] > limit else runners.silu(args)
        return launch

    run = _run(device, skips_after(10 ** 6))
    assert run.eager("candidate", check=True)[1] == ""
    run = _run(device, skips_after(40))  # the warm-up and a few rounds, then nothing
    _us, wrong = run.eager("candidate", check=True)
    assert wrong.startswith("eager calls, launch 0 of") and "never written" in wrong


@pytest.mark.parametrize("count", [2, 5, 21, EAGER_ROUND + 2])
@pytest.mark.parametrize("shape", [(3, 64), (9, 520)])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_in_place_ops_are_restored_before_every_replay_and_eager_round(device, count, shape, dtype):
    """Fewer sets than an eager round's calls (5 or 19 at 8192 or 2048 x 4096 on a GPU): each set is still called
    once a round, so that it holds one call's work, which is what the check computes."""
    run = _run(device, fakegraph.graphed(runners.fused_add_rmsnorm), op="fused_add_rmsnorm", shape=shape,
               count=count, dtype=dtype)
    assert _graphs(run)[1] == ""
    calls = []
    run.fns["candidate"] = lambda i: calls.append(i) or runners.fused_add_rmsnorm(run.sets.arena.args(i))
    us, wrong = run.eager("candidate", check=True)
    assert wrong == "" and us > 0
    assert len(calls) > 10 + EAGER_ROUND  # the warm-up, then rounds of calls: not one call a round


def test_an_in_place_op_left_undone_in_the_eager_calls_fails(device):
    calls = [0]

    def lazy(args):  # honest through the warm-up and the first rounds, then nothing
        calls[0] += 1
        return 0 if calls[0] > 30 else runners.fused_add_rmsnorm(args)

    run = _run(device, lazy, op="fused_add_rmsnorm", shape=(3, 64), count=5)
    _us, wrong = run.eager("candidate", check=True)
    assert wrong.startswith("eager calls, launch 0 of ") and "left unwritten (still what they held" in wrong, wrong


def test_forbidden_writes_in_a_timed_launch_are_named(device):
    wrong = _graphs(_run(device, fakegraph.graphed(runners.silu_scratches_input)))[1]
    assert "input: wrote into an input-only argument" in wrong, wrong
    wrong = _graphs(_run(device, fakegraph.graphed(runners.silu_writes_past_end)))[1]
    assert "out: wrote outside the tensor, at element +0 past its end" in wrong, wrong


@pytest.mark.parametrize("kind", ["nan", "stale", "finite"])
def test_preparation_changes_one_element_per_set_and_puts_the_kind_in_the_outputs(device, kind):
    sets = _sets(device, count=5)
    for k in range(5):
        runners.silu(sets.arena.args(k))
    done = sets.arena.rows(1).clone()
    drawn = sets.arena.rows(0).clone()
    sets.prepare(kind)
    changed = (draw.bits(sets.arena.rows(0)) != draw.bits(drawn)).flatten(1).sum(1)
    assert changed.tolist() == [1] * 5  # one element of every set's input
    outputs = sets.arena.rows(1)
    if kind == "nan":
        assert bool(draw.poisoned(outputs).all())
    elif kind == "finite":
        assert bool(torch.isfinite(outputs.float()).all()) and not torch.equal(outputs, done)
    else:
        assert torch.equal(outputs, done)  # as the last launches left them
    sets.prepare("nan")  # the last change undone, a new one made
    assert (draw.bits(sets.arena.rows(0)) != draw.bits(drawn)).flatten(1).sum(1).tolist() == [1] * 5
    for k in range(5):
        assert torch.equal(sets.expected_inputs(k).tensors[0], sets.arena.args(k).tensors[0])


def test_a_kernel_skipping_outputs_that_look_done_is_told_by_the_stale_kind(device):
    sets = _sets(device, count=4)
    for k in range(4):
        runners.silu(sets.arena.args(k))
    sets.prepare("stale")
    for k in range(4):
        runners.silu_skips_done_outputs(sets.arena.args(k))
    wrong = sets.check_left(list(range(4)), "the timed graph")
    assert "left unwritten (still the previous launch's results)" in wrong, wrong


@pytest.mark.parametrize("per_set, floor, budget, low, high", [
    (8 << 10, 0.6, 1 << 40, -(-MIN_REPLAY_US // 0.6), 500 * 9 // 8),  # 1x4096: the replay's length rules
    (8 << 10, 0.1, 1 << 40, MAX_LAUNCHES, MAX_LAUNCHES * 9 // 8),
    (44 << 20, 15.0, 1 << 40, 20, 22),  # 512x14336 silu at the copy roofline
    (350 << 20, 117.0, 1 << 40, 3, 3),
    (44 << 20, 15.0, 10 * (44 << 20), 9, 9),  # the budget, one set kept for the second graph
    (1 << 30, 400.0, 1 << 29, 1, 1),  # never none
])
def test_plan_sets(per_set, floor, budget, low, high):
    counts = {plan_sets(per_set, floor, budget, random.Random(seed)) for seed in range(30)}
    assert low <= min(counts) and max(counts) <= high
    if high > low + 1:
        assert len(counts) > 1  # the count is drawn: a kernel cannot know it ahead


def test_the_second_graph_is_checked_in_its_last_launches(device):
    run = _run(device, fakegraph.graphed(runners.silu), count=CHECK_TAIL + 20)
    seen = []
    real = run.sets.check_left
    run.sets.check_left = lambda order, what, early=None, tail=None: seen.append(tail) or real(order, what, early, tail)
    assert _graphs(run)[1] == "" and seen == [None, CHECK_TAIL]
