"""fp8_w8a8 fused MoE inputs on CPU (triton/moe/fp8.py): the per-expert weight quantization, the static activation
scales calibrated on a batch, and a reference that rounds what the kernel rounds, over odd shapes; SGLang's fp8
picks and first guesses by its own lookup; a quantization no shape knows is refused."""
from __future__ import annotations

import pytest
import torch

from astra_sglang.errors import AstraError
from astra_sglang.triton.moe import configs as moe_configs
from astra_sglang.triton.moe import fp8
from astra_sglang.triton.moe.reference import fused_moe
from astra_sglang.triton.moe.shapes import MoeShape
from astra_sglang.triton.moe.space import MoeConfig

SHAPES = [(3, 24, 40, 2, 5), (8, 96, 64, 2, 1), (5, 40, 72, 3, 17)]
"""(experts, inter, hidden, topk, tokens): odd sizes, one token to seventeen."""


def _draw(experts, inter, hidden, tokens, seed=0):
    gen = torch.Generator().manual_seed(seed)
    w1 = torch.randn(experts, 2 * inter, hidden, generator=gen) * 0.02
    w2 = torch.randn(experts, hidden, inter, generator=gen) * 0.01
    x = torch.randn(tokens, hidden, generator=gen).to(torch.bfloat16)
    logits = torch.randn(tokens, experts, generator=gen)
    return w1, w2, x, logits


@pytest.mark.parametrize("experts, inter, hidden, topk, tokens", SHAPES)
def test_weights_quantize_per_expert_within_one_fp8_step(experts, inter, hidden, topk, tokens):
    w1, w2, *_ = _draw(experts, inter, hidden, tokens)
    q = fp8.Fp8Experts.of(w1, w2)
    assert q.w1.dtype == q.w2.dtype == torch.float8_e4m3fn and q.w1_scale.shape == q.w2_scale.shape == (experts,)
    d1, d2 = q.dequantized()
    for w, d, s in ((w1, d1, q.w1_scale), (w2, d2, q.w2_scale)):
        assert torch.allclose(d.abs().amax(dim=(1, 2)), w.abs().amax(dim=(1, 2)), rtol=1e-6)  # the extremes exact
        # e4m3 keeps 3 mantissa bits: a value moves by at most half a step, 1/16 of it, or of the subnormal step
        assert bool(((d - w).abs() <= w.abs() / 16 + s.view(-1, 1, 1) * 2.0 ** -9 + 1e-12).all())


@pytest.mark.parametrize("experts, inter, hidden, topk, tokens", SHAPES)
def test_activation_scales_fit_the_batch_and_the_reference_rounds_as_the_kernel(experts, inter, hidden, topk, tokens):
    w1, w2, x, logits = _draw(experts, inter, hidden, tokens)
    q = fp8.Fp8Experts.of(w1, w2)
    q.calibrate(x, logits, topk)
    assert q.a1_scale.item() == pytest.approx(x.float().abs().max().item() / fp8.FP8_MAX, rel=1e-6)
    mids = []
    d1, d2 = q.dequantized()
    plain = x.float().clone()
    fused_moe(plain.clone(), d1, d2, logits, torch.empty(tokens, topk), quant_in=lambda a: fp8.fake_quant(a, q.a1_scale),
              quant_mid=lambda a: mids.append(a) or a)  # the down GEMM's input comes from the quantized input's
    fused_moe(plain, d1, d2, logits, torch.empty(tokens, topk))
    assert q.a2_scale.item() == pytest.approx(max(float(a.abs().max()) for a in mids) / fp8.FP8_MAX, rel=1e-5)
    ref = q.reference(x, logits, topk)
    assert ref.dtype == torch.float32 and ref.shape == (tokens, hidden)
    # the roundings of the GEMMs' inputs move the output by a small fraction of its scale, inside the check's bound
    atol, rtol = fp8.TOLERANCE
    err = (ref - plain).abs() / (atol + rtol * plain.abs())
    assert 0 < float(err.max()) < 0.5
    again = q.reference(x, logits, topk)
    assert torch.equal(ref, again)


def test_fake_quant_saturates_and_keeps_representable_values():
    scale = torch.tensor([0.5])
    t = torch.tensor([0.0, 0.5, 1.0, -3.25, 1e6])
    out = fp8.fake_quant(t, scale)
    assert out.tolist() == [0.0, 0.5, 1.0, -3.25, fp8.FP8_MAX * 0.5]


def test_a_quantization_no_shape_knows_is_refused():
    assert MoeShape(8, 7168, 4096, 2, quant="fp8_w8a8").config_dtype == "fp8_w8a8"
    assert MoeShape(8, 7168, 4096, 2).config_dtype is None
    with pytest.raises(AstraError, match="unknown MoE quantization 'int4_w4a16': one of \\(none\\), fp8_w8a8"):
        MoeShape(8, 7168, 4096, 2, quant="int4_w4a16")


def test_sglangs_fp8_pick_and_first_guesses_are_its_fp8_files(sglang_lookup, monkeypatch):
    monkeypatch.delenv(moe_configs.ENV, raising=False)
    picks = moe_configs.sglang_picks(8, 7168, 4096, 2, [1, 64], "fp8_w8a8")
    assert [p.source for p in picks] == ["file", "file"]
    assert all("dtype=fp8_w8a8" in p.path and "NVIDIA_H100_80GB_HBM3" in p.path for p in picks)
    table = moe_configs.read(picks[0].path)
    assert picks[1].config == MoeConfig.from_sglang(table[moe_configs.nearest(table, 64)])
    bf16 = moe_configs.sglang_picks(8, 7168, 4096, 2, [1], None)[0]
    assert "dtype=" not in bf16.path
    guesses = moe_configs.shipped_configs(8, 7168, 64, dtype="fp8_w8a8")
    assert MoeConfig.from_sglang(table[moe_configs.nearest(table, 64)]) in guesses
    assert guesses != moe_configs.shipped_configs(8, 7168, 64)


@pytest.mark.parametrize("experts, inter, hidden, topk, tokens", SHAPES)
def test_preparing_a_batch_dequantizes_once_and_matches_calibrate_then_reference(experts, inter, hidden, topk, tokens,
                                                                                 monkeypatch):
    """The screening launch's path (prepare): the same scales and a bit-identical reference as calibrating and then
    computing the reference apart, with each expert tensor dequantized once instead of twice."""
    w1, w2, x, logits = _draw(experts, inter, hidden, tokens)
    apart, once = fp8.Fp8Experts.of(w1, w2), fp8.Fp8Experts.of(w1, w2)
    apart.calibrate(x, logits, topk)
    expect = apart.reference(x, logits, topk)
    calls, dequantize = [], fp8.dequantize
    monkeypatch.setattr(fp8, "dequantize", lambda w, s: calls.append(w.shape) or dequantize(w, s))
    got = once.prepare(x, logits, topk)
    assert calls == [w1.shape, w2.shape]
    assert torch.equal(got, expect) and torch.equal(once.a1_scale, apart.a1_scale)
    assert torch.equal(once.a2_scale, apart.a2_scale)
