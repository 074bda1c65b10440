"""Fused MoE's reference and routing, and the spec's tolerance against an emulation of SGLang's roundings."""
from __future__ import annotations

import pytest
import torch

from astra_sglang.harness.inputs import allocate, fill
from astra_sglang.specs.registry import get_spec
from astra_sglang.triton.moe.op import route_into
from astra_sglang.triton.moe.reference import fused_moe, route


def _naive(hidden, w1, w2, logits, topk):
    inter = w2.shape[2]
    out = torch.zeros_like(hidden)
    for t in range(hidden.shape[0]):
        order = sorted(range(logits.shape[1]), key=lambda e: (-float(logits[t, e]), e))[:topk]
        probs = torch.softmax(logits[t], dim=0)[order]
        probs = probs / probs.sum()
        for weight, e in zip(probs, order):
            gate_up = w1[e] @ hidden[t]
            out[t] += weight * (w2[e] @ (torch.nn.functional.silu(gate_up[:inter]) * gate_up[inter:]))
    return out


def _args(shape, dtype="float32", seed=0):
    spec = get_spec("fused_moe")
    return fill(spec, allocate(spec, shape, dtype, "cpu", guard=False), torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("shape", [(1, 8, 16, 32, 2), (7, 16, 8, 24, 4), (33, 4, 40, 16, 4)])
def test_reference_matches_a_token_by_token_loop(shape):
    args = _args(shape).upcast()
    hidden, w1, w2, logits, weights = args.tensors
    expect = _naive(hidden.clone(), w1, w2, logits, shape[4])
    fused_moe(*args.tensors)
    assert torch.allclose(hidden, expect, atol=1e-12, rtol=1e-10)
    assert torch.allclose(weights.sum(-1), torch.ones(shape[0], dtype=torch.float64))


def test_ties_go_to_the_lower_expert_in_both_precisions():
    logits = torch.tensor([[0.5, 2.0, 2.0, 1.0, 2.0]])
    ids, weights = route(logits, 2)
    assert ids.tolist() == [[1, 2]] and torch.allclose(weights, torch.tensor([[0.5, 0.5]]))
    out = torch.empty(1, 2)
    assert route_into(logits, out).tolist() == [[1, 2]] and route(logits.double(), 2)[0].tolist() == [[1, 2]]


def test_op_routing_is_the_references():
    logits = torch.randn(257, 64, generator=torch.Generator().manual_seed(3))
    weights = torch.empty(257, 8)
    ids = route_into(logits, weights)
    ref_ids, ref_weights = route(logits.double(), 8)
    assert ids.dtype == torch.int32 and torch.equal(ids.long(), ref_ids)
    assert torch.allclose(weights.double(), ref_weights, atol=1e-7)


def _emulate(hidden, w1, w2, logits, topk, dtype):
    """SGLang's roundings: the gate/up GEMM (fp32 accumulation) stored in `dtype`, the activation stored in
    `dtype`, the down GEMM times the routing weight stored in `dtype`, the top-k summed in fp32."""
    inter = w2.shape[2]
    ids, weights = route(logits, topk)
    partial = torch.zeros(hidden.shape[0], topk, hidden.shape[1])
    for e in ids.unique().tolist():
        rows, slots = torch.nonzero(ids == e, as_tuple=True)
        gate_up = (hidden[rows].float() @ w1[e].float().T).to(dtype).float()
        act = (torch.nn.functional.silu(gate_up[:, :inter]) * gate_up[:, inter:]).to(dtype).float()
        partial[rows, slots] = ((act @ w2[e].float().T) * weights[rows, slots, None]).to(dtype).float()
    return partial.sum(1).to(dtype)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("shape", [(64, 128, 768, 2048, 8), (16, 8, 4096, 1024, 2)])
def test_tolerance_holds_sglangs_roundings_with_margin(shape, dtype):
    spec = get_spec("fused_moe")
    args = _args(shape, dtype, seed=1)
    got = _emulate(*args.tensors[:4], shape[4], getattr(torch, dtype))
    ref = args.upcast()
    fused_moe(*ref.tensors)
    tol = spec.tolerance[dtype]
    ratio = ((got.double() - ref.tensors[0]).abs() / (tol.atol + tol.rtol * ref.tensors[0].abs())).max()
    assert ratio < 0.5, f"worst element at {float(ratio):.2f} of the tolerance"
