"""The sandwich timing on CPU (harness/sandwich.py): the neighbours' shapes from the spec and the model
config, the op's share and speedup from the three graphs' times, and the check of the candidate's replay;
graphs are recorded calls here (a replay runs them again)."""
import random
import time

import pytest
import torch

from astra_sglang.harness.records import Timing
from astra_sglang.harness.sandwich import Sandwich, gemms
from astra_sglang.specs.registry import get_spec, model_for, resolve_shapes
from tests.evaluator import runners

REPLAYS = [0]


def record(fn, order):
    """A graph of every call fn(i) makes, replayed whole (GEMMs included)."""
    return [lambda i=i: fn(i) for i in order]


def replay(graph, then=None):
    REPLAYS[0] += 1
    start = time.perf_counter()
    for call in graph:
        call()
    return (time.perf_counter() - start) * 1e6, then() if then else None


@pytest.mark.parametrize("op, tokens, before, after", [
    ("silu_and_mul", 64, "gate_up_proj 64x4096x28672", "down_proj 64x14336x4096"),
    ("rmsnorm", 64, "down_proj 64x14336x4096", "qkv_proj 64x4096x6144"),
    ("fused_add_rmsnorm", 1, "o_proj 1x4096x4096", "gate_up_proj 1x4096x28672"),
    ("gemma_rmsnorm", 8, "down_proj 8x18944x3584", "qkv_proj 8x3584x4608"),
    ("merge_attn_states_lse", 17, "extend attention (a GEMM as wide stands in) 17x4096x4096", "o_proj 17x4096x4096"),
])
def test_the_neighbours_come_from_the_spec_and_the_model(op, tokens, before, after):
    spec = get_spec(op)
    served = resolve_shapes(spec, "served")
    assert [s[0] for s in served] == spec.shapes.tokens
    shape = (tokens, *served[0][1:])
    b, a = gemms(spec, shape, model_for(spec, shape))
    assert (b.describe(), a.describe()) == (before, after)


def test_a_shape_of_no_model_has_no_sandwich():
    spec = get_spec("silu_and_mul")
    assert model_for(spec, (64, 12345)) is None
    assert Sandwich.for_shape(spec, (64, 12345), "float32", "cpu") is None
    assert Sandwich.for_shape(get_spec("topk_softmax"), (64, 128, 8), "float32", "cpu") is None  # no neighbours


def _sandwich(op="silu_and_mul", shape=(2, 14336)):
    spec = get_spec(op)
    return Sandwich(spec, shape, "float32", "cpu", model_for(spec, shape), capture=record, replay=replay)


def test_an_honest_op_is_timed_between_its_gemms(cpu_cuda):
    timing, wrong = _sandwich().run(runners.silu, runners.silu, random.Random(1), replays=2, warmup=1,
                                    warmup_s=0.0)
    assert wrong == "" and timing.repeats >= 2 and timing.model == "llama-3-8b"
    assert timing.before == "gate_up_proj 2x4096x28672" and timing.candidate_us.median_us > 0


def test_an_in_place_op_is_checked_on_what_its_gemm_wrote(cpu_cuda):
    def fused(args):  # residual += input; input = rmsnorm(residual) * weight
        x, r, w = args.tensors
        s = r.float() + x.float()
        r.copy_(s)
        x.copy_(s * torch.rsqrt((s * s).mean(-1, keepdim=True) + args.scalars[0]) * w.float())
        return 0

    _timing, wrong = _sandwich("fused_add_rmsnorm", (2, 4096)).run(fused, fused, random.Random(2), replays=2,
                                                                   warmup=1, warmup_s=0.0)
    assert wrong == ""


def test_doing_later_repeats_work_early_reads_inputs_their_gemm_has_not_written_yet(cpu_cuda):
    seen, state = {}, {"replay": None}

    def look_ahead(args):  # at the first launch of a replay, every set it has met; later launches nothing
        seen[id(args)] = args
        if state["replay"] != REPLAYS[0]:
            state["replay"] = REPLAYS[0]
            for other in seen.values():
                runners.silu(other)
        return 0

    _timing, wrong = _sandwich().run(look_ahead, runners.silu, random.Random(3), replays=2, warmup=1, warmup_s=0.0)
    assert wrong.startswith("the sandwich's timed graph, repeat ") and "out: " in wrong, wrong


def test_the_ops_share_is_the_sandwich_less_the_gemms_alone():
    sandwich = _sandwich()
    samples = {"candidate": [52.0, 51.0, 53.0], "baseline": [54.0, 53.0, 55.5], "gemms": [50.0, 49.0, 51.0]}
    timing = sandwich.figures(samples, 4)
    assert timing.op_candidate_us == pytest.approx(2.0) and timing.op_baseline_us == pytest.approx(4.0)
    assert timing.speedup == pytest.approx(2.0) and timing.saved_us == pytest.approx(2.0)
    assert timing.gemms_us == Timing(median_us=50.0, p10_us=timing.gemms_us.p10_us, p90_us=timing.gemms_us.p90_us)


def test_an_op_the_gemms_spread_swallows_has_no_in_place_speedup():
    """A 0.7 us op beside a 75 us GEMM pair: rounds where the share comes out negative would leave a biased few
    (an H200 run printed "7.9x" from a -0.33 us median share); no figure rather than that one."""
    sandwich = _sandwich()
    alone = [75.0, 76.0, 74.0, 75.5, 74.5, 75.0, 76.5, 74.0, 75.0, 75.2]
    cand = [74.8, 76.2, 74.1, 75.1, 74.9, 74.6, 76.9, 73.7, 75.4, 75.0]
    base = [75.7, 76.6, 74.8, 76.2, 75.1, 75.8, 77.0, 74.9, 75.6, 75.9]
    timing = sandwich.figures({"candidate": cand, "baseline": base, "gemms": alone}, 4)
    assert timing.speedup is None
    assert timing.saved_us > 0  # the difference of the two sandwiches stays a figure
