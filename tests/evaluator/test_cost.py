"""Cost models: a spec without one moves its tensors' bytes and does no FLOPs; one with a model (fused MoE)
counts the experts read from below and its GEMMs' arithmetic exactly."""
import math

import pytest

from astra_sglang.errors import AstraError
from astra_sglang.harness.cost import Cost, shape_cost
from astra_sglang.specs.registry import get_spec
from astra_sglang.triton.cost import experts_read


def test_specs_without_a_model_move_their_tensors():
    spec = get_spec("silu_and_mul")
    assert shape_cost(spec, (64, 4096), "bfloat16") == Cost(spec.min_bytes((64, 4096), "bfloat16"), 0)


@pytest.mark.parametrize("tokens, experts, topk, expect", [
    (1, 128, 8, 8),      # one token reads exactly its top-k experts
    (2, 128, 8, 8),      # two may share them all: the bound stays at one token's
    (4096, 128, 8, 128),  # every expert, with overwhelming probability
    (1, 8, 2, 2),
])
def test_experts_read_lower_bound(tokens, experts, topk, expect):
    assert experts_read(tokens, experts, topk) == expect


def test_experts_read_is_below_what_random_routing_reads():
    import torch

    gen = torch.Generator().manual_seed(0)
    for tokens in (3, 8, 16, 64, 200):
        bound = experts_read(tokens, 128, 8)
        for _ in range(200):
            chosen = torch.rand(tokens, 128, generator=gen).argsort(dim=1)[:, :8].unique().numel()
            assert chosen >= bound


def test_fused_moe_cost():
    spec = get_spec("fused_moe")
    tokens, experts, inter, hidden, topk = shape = (64, 128, 768, 2048, 8)
    cost = shape_cost(spec, shape, "bfloat16")
    assert cost.flops == 2 * tokens * topk * (2 * inter * hidden + inter * hidden)
    weights = experts_read(tokens, experts, topk) * 3 * inter * hidden * 2
    assert cost.bytes == weights + 2 * tokens * hidden * 2 + tokens * experts * 4 + tokens * topk * 4
    # never above the bytes of every tensor it is handed: a lower bound
    assert cost.bytes <= spec.min_bytes(shape, "bfloat16")
    assert math.isclose(shape_cost(spec, (4096, 128, 768, 2048, 8), "bfloat16").flops / cost.flops, 64)


def test_unknown_cost_model_is_a_clear_error():
    spec = get_spec("silu_and_mul").model_copy(update={"cost": "astra_sglang.nowhere:cost"})
    with pytest.raises(AstraError, match="cost model 'astra_sglang.nowhere:cost' not found"):
        shape_cost(spec, (1, 8), "bfloat16")
