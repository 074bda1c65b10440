"""The budget model of a fused MoE tiers run on CPU: its rates reproduce the GPU run they were measured in
(moe_costs.RUN_B: Mixtral's batch 64 on one H200), a unit starts once enough of its configs are compiled for its
GPU never to wait, the plan keeps only what ends by the deadline (every unit planned screened whole in its
estimate), and the order puts SGLang's pick farthest from its floor first; the floor itself (moe_roofline)."""
from __future__ import annotations

import pytest
import torch

from astra_sglang.optimize.tuner.moe_budget import Unit, fit, run_order, simulate
from astra_sglang.optimize.tuner.moe_costs import Costs, config_s, lead
from astra_sglang.optimize.tuner.moe_roofline import floor
from astra_sglang.triton import cost
from astra_sglang.triton.moe.shapes import MoeShape

MIXTRAL, QWEN3 = MoeShape(8, 14336, 4096, 2), MoeShape(128, 768, 2048, 8)
H200 = "NVIDIA H200"


def test_the_rates_reproduce_the_run_they_were_measured_in():
    """RUN_B: 1,320 timed configs of Mixtral's space at batch 64 (SGLang's pick 665.6 us) took 69.1 s of the
    worker (56.2 s for 978 done, 12.9 s for 342 cut) and the unit ended 134 s after the plan (09:38:08 ->
    09:40:22) on one GPU with 36 compile processes."""
    assert config_s(665.6, Costs()) == pytest.approx((56.2 + 12.9) / 1320, rel=0.05)
    line = simulate([Unit("mixtral", 64, 1320, 665.6)], gpus=1, cores=36)
    assert line.placed[0].screened == 1320 and line.placed[0].end_s == pytest.approx(134.0, rel=0.1)


@pytest.mark.parametrize("configs", [1, 7, 1320])
@pytest.mark.parametrize("gpu_s, compile_s", [(0.05, 0.03), (0.02, 0.037), (0.001, 0.5), (0.04, 0.04)])
def test_a_unit_started_at_its_lead_never_waits_for_its_compiles(configs, gpu_s, compile_s):
    def waits(prefix: int) -> bool:  # config i ready at (i + 1) x compile_s, the GPU starting at prefix's
        start = prefix * compile_s
        return any((i + 1) * compile_s > start + i * gpu_s + 1e-12 for i in range(configs))

    p = lead(configs, gpu_s, compile_s)
    assert 1 <= p <= configs and not waits(p)
    assert p == 1 or waits(p - 1)  # and no sooner


def _unit(tokens: int, configs: int = 1320, shape: str = "qwen3", knob: bool = False, gap: float = 1.0) -> Unit:
    return Unit(shape, tokens, configs, 300.0, knob=knob, gap=gap)


def test_the_plan_keeps_only_what_ends_by_the_deadline():
    candidates = [_unit(t, gap=g) for t, g in [(64, 1.2), (16, 1.5), (1, 3.0), (256, 1.1), (1024, 2.0)]]
    costs = Costs()
    for gpus, cores, deadline in [(1, 36, 420.0), (2, 18, 480.0), (4, 36, 480.0)]:
        fitted = fit(candidates, deadline, gpus, cores, costs)
        line = fitted.timeline
        assert line.end_s <= deadline * (1 - costs.slack)
        assert all(p.screened == p.unit.configs for p in line.placed)  # every unit planned is delivered
        assert len(fitted.chosen) + len(fitted.deferred) == len(candidates)
        for unit in fitted.deferred:  # each deferred one would not have fitted beside the chosen
            assert simulate(run_order(fitted.chosen + [unit]), gpus, cores, costs).end_s > deadline * (1 - costs.slack)
    assert fit(candidates, 5000.0, 2, 18).deferred == []
    assert fit([_unit(1, knob=True)], 1000.0, 2, 18).deferred  # a knob unit never without its plain one


def test_the_units_farthest_from_their_floor_run_first_each_knob_after_its_plain_unit():
    units = [_unit(64, gap=1.1), _unit(1, gap=3.0), _unit(1, 50, knob=True, gap=3.0), _unit(1024, gap=2.0)]
    assert [u.name for u in run_order(units)] == ["qwen3@1", "qwen3@1+knob", "qwen3@1024", "qwen3@64"]


def test_compiles_bound_the_screen_where_the_gpu_is_faster_than_the_cores():
    """Nothing is shared between batch sizes: two units compile twice as much as one; on one core a unit's
    configs come slower than the GPU takes them, so the unit starts late and ends with its last compile."""
    one, two = (simulate([_unit(t) for t in ts], gpus=2, cores=4) for ts in ([64], [64, 16]))
    assert two.compile_s - one.compile_s == pytest.approx(1320 * Costs().config_compile_s / 4)
    slow = simulate([_unit(64)], gpus=1, cores=1).placed[0]
    assert slow.start_s > Costs().start_s + 60  # waited for its lead


def test_an_fp8_screen_is_planned_at_its_own_compile_rate():
    """Mixtral TP2 fp8_w8a8 @1 on an H200 (moe-bar page, 2026-11-27): 30 compile processes, SGLang's pick 64.0 us;
    its screen reached 1,681 of 1,709 configs by 178 s after the start, where the plan at the bf16 compile rate put
    its end at 141 s. At fp8's own rate (Costs.fp8_compile_factor) the plan ends past the cut."""
    bf16 = simulate([Unit("mixtral-8x7b-tp2-fp8", 1, 1709, 64.0)], gpus=2, cores=30).placed[0]
    fp8 = simulate([Unit("mixtral-8x7b-tp2-fp8", 1, 1709, 64.0, compile_factor=Costs().fp8_compile_factor)],
                   gpus=2, cores=30).placed[0]
    assert bf16.end_s == pytest.approx(141.0, abs=5.0)
    assert fp8.end_s > 178.0 and fp8.start_s > bf16.start_s


def test_mixtral_at_batch_64_runs_near_its_memory_floor():
    f = floor(MIXTRAL, 64, H200)
    assert f.bound == "memory" and f.experts == pytest.approx(8.0, abs=1e-6)
    assert 8 * 3 * 14336 * 4096 * 2 == pytest.approx(2.818e9, rel=1e-3) and f.bytes == pytest.approx(2.831e9, rel=1e-3)
    assert f.us == pytest.approx(589.8, abs=0.5) and f.share(665.6) == pytest.approx(0.886, abs=0.002)
    assert floor(MIXTRAL, 4096, H200).bound == "compute"  # 2.9 TFLOP a call
    assert floor(QWEN3, 1, H200).us < floor(QWEN3, 16, H200).us / 5  # 8 of 128 experts at decode
    assert floor(MIXTRAL, 64, "NVIDIA H100 80GB HBM3").us == pytest.approx(f.us * 4.8 / 3.35, rel=1e-6)


@pytest.mark.parametrize("experts, topk, tokens", [(8, 2, 1), (8, 2, 3), (60, 4, 7), (128, 8, 16), (64, 6, 33)])
def test_experts_touched_match_random_top_k_routing(experts, topk, tokens):
    gen = torch.Generator().manual_seed(experts * 1000 + tokens)
    counts = [torch.rand(tokens, experts, generator=gen).topk(topk, dim=1).indices.unique().numel()
              for _ in range(2000)]
    assert cost.experts_expected(tokens, experts, topk) == pytest.approx(sum(counts) / len(counts), rel=0.02)


@pytest.mark.parametrize("shape", [MIXTRAL, QWEN3, MoeShape(3, 24, 40, 2, "float16"),
                                   MoeShape(8, 7168, 4096, 2, quant="fp8_w8a8")])
@pytest.mark.parametrize("tokens", [1, 7, 64, 4096])
def test_the_floor_counts_the_cost_models_weights_and_flops(shape, tokens):
    """The floor's weights and FLOPs are the physics bound's (triton/cost.py), the experts in expectation rather
    than from below, the weights in their stored width; only the activations differ (SGLang's intermediates)."""
    f = floor(shape, tokens, H200)
    dims = dict(zip(("tokens", "experts", "inter", "hidden", "topk"), shape.shape(tokens)))
    assert f.flops == cost.fused_moe(dims, shape.dtype)[1]
    assert cost.experts_read(tokens, shape.experts, shape.topk) <= f.experts <= shape.experts
    weights = f.experts * cost.expert_elements(shape.inter, shape.hidden) * shape.weight_bytes
    activations = (tokens * shape.hidden + tokens * shape.topk * (3 * shape.inter + shape.hidden)) * shape.element_bytes
    assert f.bytes == pytest.approx(weights + activations, rel=1e-12)


def test_an_fp8_shapes_floor_reads_its_weights_in_one_byte():
    """fp8_w8a8 Mixtral TP2 at decode: half the weight bytes of bf16, so about half the memory floor (the bf16
    activations keep it above exactly half); at 4096 tokens fp8 tensor cores halve the compute floor."""
    bf16 = MoeShape(experts=8, inter=7168, hidden=4096, topk=2)
    fp8 = MoeShape(experts=8, inter=7168, hidden=4096, topk=2, quant="fp8_w8a8")
    assert floor(fp8, 64, H200).bytes < 0.52 * floor(bf16, 64, H200).bytes
    assert floor(fp8, 64, H200).us == pytest.approx(floor(bf16, 64, H200).us / 2, rel=0.04)
    assert floor(fp8, 4096, H200).flops == floor(bf16, 4096, H200).flops
    assert floor(fp8, 4096, H200).us < floor(bf16, 4096, H200).us
