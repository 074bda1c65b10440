"""The per-token-group FP8 quantization spec: an fp8 output and an fp32 scales output shaped by a free dim
that a scalar argument carries (group_size = group), drawn, referenced and compared on CPU, and SGLang's call
(outputs allocated by the op and returned) bound by the patch layer."""
from __future__ import annotations

import pytest
import torch

from astra_sglang.harness.compare import compare
from astra_sglang.harness.inputs import allocate, fill
from astra_sglang.ops.quant import FP8_E4M3_MAX, per_token_group_quant_fp8
from astra_sglang.patching.ops import PatchedOp
from astra_sglang.patching.stats import OpStats
from astra_sglang.specs.registry import get_spec

SHAPES = [(1, 128), (3, 384), (7, 2048), (33, 7168)]


@pytest.mark.parametrize("shape", SHAPES)
def test_reference_quantizes_each_group_to_full_fp8_range(shape):
    spec = get_spec("per_token_group_quant_fp8")
    args = fill(spec, allocate(spec, shape, "bfloat16", "cpu"), torch.Generator().manual_seed(0))
    x, x_q, x_s = args.tensors
    assert args.scalars == [128, 1e-10] and x_q.dtype == torch.float8_e4m3fn and x_s.shape == (shape[0], shape[1] // 128)
    ref = args.upcast()
    spec.reference_fn()(*ref.call_args(spec))
    got = args.clone()
    spec.reference_fn()(*got.call_args(spec))  # quantized into the real fp8 / fp32 outputs
    assert compare(spec, "bfloat16", got, ref).ok
    groups = got.tensors[1].double().reshape(shape[0], -1, 128)
    assert torch.equal(groups.abs().amax(-1), torch.full_like(groups[..., 0], FP8_E4M3_MAX))
    scale = got.tensors[2].double()[..., None]
    err = (groups * scale - x.double().reshape(groups.shape)).abs()
    # half an fp8 step: 2^-4 of the value (3 mantissa bits), or of the smallest subnormal (2^-9) times the scale
    assert bool((err <= 2 ** -4 * x.double().reshape(groups.shape).abs() + 2 ** -10 * scale + 1e-12).all())


def test_a_wrong_scale_or_unwritten_fp8_output_fails():
    spec = get_spec("per_token_group_quant_fp8")
    args = fill(spec, allocate(spec, (3, 384), "bfloat16", "cpu"), torch.Generator().manual_seed(1))
    ref = args.upcast()
    spec.reference_fn()(*ref.call_args(spec))
    got = args.clone()
    spec.reference_fn()(*got.call_args(spec))
    half = got.clone()
    half.tensors[2][0, 0] *= 1.001
    assert not compare(spec, "bfloat16", half, ref).ok
    assert "x_q: never written" in compare(spec, "bfloat16", args, ref).reason


def sglang_per_token_group_quant_fp8(x, group_size, eps=1e-10, column_major_scales=False, scale_tma_aligned=False,
                                     scale_ue8m0=False, fuse_silu_and_mul=False, masked_m=None):
    """SGLang's signature: allocates both outputs and returns them."""
    x_q = torch.empty(x.shape, dtype=torch.float8_e4m3fn)
    x_s = torch.empty(x.shape[0], x.shape[1] // group_size, dtype=torch.float32)
    per_token_group_quant_fp8(x, group_size, eps, x_q, x_s)
    return x_q, x_s


def _op():
    stats = OpStats("per_token_group_quant_fp8")

    def launch(tensors, scalars):
        x, x_q, x_s = tensors
        per_token_group_quant_fp8(x, int(scalars[0]), scalars[1], x_q, x_s)
        return 0

    return PatchedOp(get_spec("per_token_group_quant_fp8"), launch, sglang_per_token_group_quant_fp8, stats,
                     device_type="cpu"), stats


def test_patched_call_allocates_and_returns_both_outputs():
    op, stats = _op()
    x = torch.randn(5, 256, dtype=torch.bfloat16)
    x_q, x_s = op.fn(x, 128)
    want_q, want_s = sglang_per_token_group_quant_fp8(x, 128)
    assert x_q.dtype == torch.float8_e4m3fn and x_s.shape == (5, 2) and stats.kernel_calls == 1
    assert torch.equal(x_q.view(torch.uint8), want_q.view(torch.uint8)) and torch.equal(x_s, want_s)


def test_other_group_sizes_and_layouts_are_served_by_the_original():
    op, stats = _op()
    x = torch.randn(4, 256, dtype=torch.bfloat16)
    x_q, x_s = op.fn(x, 32)  # SGLang's apply_fp8_linear with a 32-wide block: x_s is 4x8, not the spec's 4x2
    assert x_s.shape == (4, 8) and stats.kernel_calls == 0
    op.fn(x, 128, column_major_scales=True)
    assert stats.fallbacks == 2 and stats.reasons["argument column_major_scales (not in the spec) given"] == 1
