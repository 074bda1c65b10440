"""The check of what the timed launches computed (harness/timed.py), on CPU: a "graph" here is a Python
closure over the argument sets, captured once and replayed, as a CUDA graph is."""
import pytest
import torch

from astra_sglang.harness.timed import TimedSets
from astra_sglang.specs.registry import get_spec
from tests.evaluator import runners


def _sets(cpu_cuda, op="silu_and_mul", shape=(4, 64), count=6, hot=False):
    sets = TimedSets(get_spec(op), shape, "bfloat16", cpu_cuda, seed=11, hot=hot)
    sets.grow(count)
    return sets


def honest(sets, runner=runners.silu):
    return lambda: [runner(s) for s in sets.sets]


@pytest.mark.parametrize("count", [1, 2, 7])
@pytest.mark.parametrize("hot", [False, True])
def test_honest_launches_pass(cpu_cuda, count, hot):
    sets = _sets(cpu_cuda, count=count, hot=hot)
    assert sets.verify(honest(sets), "the timed graph") == ""


def test_in_place_ops_are_restored_before_the_check(cpu_cuda):
    spec = get_spec("fused_add_rmsnorm")

    def fused(args):  # residual += input; input = rmsnorm(residual) * weight
        x, r, w = args.tensors
        s = r.float() + x.float()
        r.copy_(s)
        s = r.float()
        x.copy_(s * torch.rsqrt((s * s).mean(-1, keepdim=True) + args.scalars[0]) * w.float())
        return 0

    sets = TimedSets(spec, (3, 64), "bfloat16", cpu_cuda, seed=2)
    sets.grow(4)
    for _ in range(5):  # timing replays: the in-place state drifts far from the drawn values
        honest(sets, fused)()
    assert sets.verify(honest(sets, fused), "the timed graph") == ""


def test_skipped_launches_are_found(cpu_cuda):
    sets = _sets(cpu_cuda)
    every_other = lambda: [runners.silu(s) for i, s in enumerate(sets.sets) if i % 3 != 2]
    reason = sets.verify(every_other, "the timed graph")
    assert reason.startswith("the timed graph, launch 2 of 6: out: ") and "never written" in reason


def test_a_result_computed_at_capture_time_is_found(cpu_cuda):
    sets = _sets(cpu_cuda)
    for s in sets.sets:
        runners.silu(s)
    captured = [s.tensors[1].clone() for s in sets.sets]  # what a graph of copies would replay

    def replay():
        for s, out in zip(sets.sets, captured):
            s.tensors[1].copy_(out)

    reason = sets.verify(replay, "the timed graph")
    assert reason.startswith("the timed graph, launch 1 of 6:") and "wrong values" in reason


@pytest.mark.parametrize("hot", [False, True])
def test_one_set_is_checked_both_as_timed_and_changed(cpu_cuda, hot):
    sets = _sets(cpu_cuda, count=1, hot=hot)
    runners.silu(sets.sets[0])
    captured = sets.sets[0].tensors[1].clone()
    reason = sets.verify(lambda: sets.sets[0].tensors[1].copy_(captured), "eager calls")
    assert reason.startswith("eager calls, launch 0 of 1:"), reason


def test_input_written_and_outside_writes_are_found(cpu_cuda):
    sets = _sets(cpu_cuda)
    assert "input: wrote into an input-only argument" in sets.verify(
        honest(sets, runners.silu_scratches_input), "the timed graph")
    sets = _sets(cpu_cuda)
    assert "out: wrote outside the tensor, at element +0 past its end" in sets.verify(
        honest(sets, runners.silu_writes_past_end), "the timed graph")


def test_hot_sets_share_their_inputs_and_own_their_outputs(cpu_cuda):
    sets = _sets(cpu_cuda, count=3, hot=True)
    ins = {s.tensors[0].data_ptr() for s in sets.sets}
    outs = {s.tensors[1].data_ptr() for s in sets.sets}
    assert len(ins) == 1 and len(outs) == 3
    cold = _sets(cpu_cuda, count=3)
    assert len({s.tensors[0].data_ptr() for s in cold.sets}) == 3
    assert cold.own_bytes() > sets.own_bytes()
