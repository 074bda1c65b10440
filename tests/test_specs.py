"""Kernel specs load into typed records, derive shapes from model configs, and match their references."""
import math

import pytest
import torch

from astra_sglang.errors import AstraError
from astra_sglang.harness.inputs import allocate, fill
from astra_sglang.specs.registry import all_specs, get_spec, model_shapes, models, resolve_shapes

OPS = ["silu_and_mul", "fused_add_rmsnorm", "rmsnorm", "merge_attn_states_lse", "merge_state", "gelu_and_mul",
       "gelu_tanh_and_mul", "gemma_rmsnorm", "gemma_fused_add_rmsnorm"]
"""The ops whose shapes come from the dense models of extract/models.toml (fused_moe's from a MoE model, topk_softmax's
from its MoE routers)."""


def test_every_op_has_a_spec():
    assert sorted(s.name for s in all_specs()) == sorted([*OPS, "fused_moe", "fused_moe_fp8", "decode_attention",
                                                          "extend_attention",
                                                          "rotary_embedding", "per_token_group_quant_fp8",
                                                          "topk_softmax"])


def test_unknown_kernel_is_a_clear_error():
    with pytest.raises(AstraError, match="unknown kernel 'nope'; known: "):
        get_spec("nope")


@pytest.mark.parametrize("op", OPS)
def test_model_shapes_cover_decode_to_prefill(op):
    spec = get_spec(op)
    shapes = model_shapes(spec)
    tokens = {s[0] for s in shapes}
    assert min(tokens) == 1 and max(tokens) == 16384
    assert len(shapes) == len(set(shapes))
    assert all(spec.supports(s) for s in shapes)


def test_model_dims_come_from_the_configs():
    silu = {s[1] for s in model_shapes(get_spec("silu_and_mul"))}
    assert silu == {m.intermediate for m in models()}
    merge = {s[1:] for s in model_shapes(get_spec("merge_attn_states_lse"))}
    assert merge == {(m.heads, m.head_dim) for m in models()}


def test_shape_selectors():
    spec = get_spec("silu_and_mul")
    assert resolve_shapes(spec, "16x4096,1x11") == [(16, 4096), (1, 11)]
    assert resolve_shapes(spec, "paper")[0] == (16, 4096)
    both = resolve_shapes(spec, "paper+edge")
    assert len(both) == len(set(both)) == len(spec.shapes.paper) + len(spec.shapes.edge)
    with pytest.raises(AstraError, match="needs 2 dims"):
        resolve_shapes(spec, "16x4096x3")


def test_min_bytes_counts_inplace_twice():
    spec = get_spec("fused_add_rmsnorm")
    # input and residual read + written, weight read once
    assert spec.min_bytes((128, 4096), "bfloat16") == 2 * 2 * 128 * 4096 * 2 + 4096 * 2
    merge = get_spec("merge_attn_states_lse")
    assert merge.min_bytes((1, 2, 8), "float16") == 3 * 16 * 2 + 3 * 2 * 4


def _run_reference(op, shape, dtype=torch.float32, edge=None):
    spec = get_spec(op)
    gen = torch.Generator().manual_seed(0)
    args = fill(spec, allocate(spec, shape, {torch.float32: "float32"}[dtype], "cpu"), gen, edge)
    ref = args.upcast()
    spec.reference_fn()(*ref.call_args(spec))
    return spec, args, ref


def test_silu_and_mul_reference():
    _, args, ref = _run_reference("silu_and_mul", (3, 5))
    x = args.tensors[0].double()
    assert torch.allclose(ref.tensors[1], x[:, :5] / (1 + torch.exp(-x[:, :5])) * x[:, 5:])


def test_fused_add_rmsnorm_reference_is_in_place_on_both():
    _, args, ref = _run_reference("fused_add_rmsnorm", (4, 16))
    inp, res, w = (t.double() for t in args.tensors[:3])
    total = inp + res
    assert torch.allclose(ref.tensors[1], total)
    expect = total / torch.sqrt((total ** 2).mean(-1, keepdim=True) + 1e-6) * w
    assert torch.allclose(ref.tensors[0], expect)


def test_merge_reference_defines_both_neg_inf_and_base():
    spec = get_spec("merge_attn_states_lse")
    edge = next(e for e in spec.edge_cases if e.name == "both_lse_neg_inf")
    _, args, ref = _run_reference("merge_attn_states_lse", (4, 2, 8), edge=edge)
    v, s = ref.tensors[4], ref.tensors[5]
    assert not torch.isnan(v).any() and not torch.isnan(s).any()
    assert torch.all(v[:2] == 0) and torch.all(torch.isneginf(s[:2]))
    # finite rows: lse = log(e^a + e^b)
    a, b = args.tensors[1][2:].double(), args.tensors[3][2:].double()
    assert torch.allclose(s[2:], torch.logaddexp(a, b))
    _, args2, ref2 = _run_reference("merge_state", (4, 2, 8))
    a, b = args2.tensors[1].double(), args2.tensors[3].double()
    assert torch.allclose(ref2.tensors[5], torch.logaddexp(a * math.log(2), b * math.log(2)) / math.log(2))


def test_sglang_baselines_name_what_sglang_calls():
    from astra_sglang.baselines.adapters import sglang_baseline

    assert sglang_baseline(get_spec("rmsnorm")) == "py:sglang.srt.layers.layernorm:rmsnorm"
    assert sglang_baseline(get_spec("silu_and_mul")) == "py:sglang.srt.layers.activation:silu_and_mul"
    assert sglang_baseline(get_spec("merge_state")).endswith("adapters:flashinfer_merge_state")
