"""fused_moe at fp8_w8a8 for the strict evaluator (spec fused_moe_fp8, op_fp8.py), on CPU: the weights are
quantized once per tensor and version (new values in the same buffer are quantized again), SGLang's fused_experts
gets the fp8 weights and the scales, and the reference quantizes the same values the same way, from the harness's
fp64 copies as from the op's bf16 tensors."""
from __future__ import annotations

import pytest
import torch

from astra_sglang.specs.registry import get_spec
from astra_sglang.triton.moe import fp8, op, op_fp8
from astra_sglang.triton.moe.reference import fused_moe
from astra_sglang.triton.moe.shapes import MoeShape
from astra_sglang.triton.moe.space import MoeConfig


def _weights(experts=4, inter=32, hidden=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    w1 = (torch.randn(experts, 2 * inter, hidden, generator=g) * 0.02).to(torch.bfloat16)
    w2 = (torch.randn(experts, hidden, inter, generator=g) * 0.01).to(torch.bfloat16)
    return w1, w2


def test_weights_are_quantized_once_per_tensor_and_version():
    op_fp8._QUANTIZED.clear()
    w1, _ = _weights()
    first = op_fp8.quantized(w1)
    assert op_fp8.quantized(w1) is first  # the same values: the kept copy, no work in a timed call
    w1.mul_(2)  # new values in the same buffer (the harness's fill writes in place)
    again = op_fp8.quantized(w1)
    assert again is not first and torch.equal(again[1], first[1] * 2)
    other = w1.clone()  # equal values, another tensor: its own entry
    assert op_fp8.quantized(other) is not again
    kept = [w1.clone() for _ in range(2 * op_fp8._KEEP)]
    for w in kept:  # live tensors past the limit: the oldest go first, not the one just quantized
        op_fp8.quantized(w)
        assert len(op_fp8._QUANTIZED) <= op_fp8._KEEP and id(w) in op_fp8._QUANTIZED
    w1b, w2b = _weights(seed=1)  # a call's two weights, with the cache full: both stay for its next call
    pair = op_fp8.quantized(w1b), op_fp8.quantized(w2b)
    assert op_fp8.quantized(w1b) is pair[0] and op_fp8.quantized(w2b) is pair[1]
    del kept
    import gc

    gc.collect()
    op_fp8.quantized(_weights(seed=2)[0])  # freed tensors' entries are dropped before anything live
    assert id(w1b) in op_fp8._QUANTIZED and id(w2b) in op_fp8._QUANTIZED and len(op_fp8._QUANTIZED) <= 4


def test_sglang_gets_the_fp8_weights_scales_and_config(monkeypatch):
    seen = {}

    def run(hidden, w1, w2, router_logits, topk_weights, config=None, quant=None):
        seen.update(w1=w1, w2=w2, config=config, quant=quant)

    monkeypatch.setattr(op, "run", run)
    w1, w2 = _weights()
    hidden, logits, weights = torch.randn(3, 64).to(torch.bfloat16), torch.randn(3, 4), torch.empty(3, 2)
    op_fp8.config_m16n64k64g1w4s3(hidden, w1, w2, logits, weights)
    assert seen["w1"].dtype == seen["w2"].dtype == fp8.FP8 and seen["config"] == MoeConfig.from_code("m16n64k64g1w4s3")
    quant = seen["quant"]
    assert quant["use_fp8_w8a8"] is True and quant["w1_scale"].shape == (4,) and quant["w2_scale"].shape == (4,)
    assert [float(quant[k]) * fp8.FP8_MAX for k in ("a1_scale", "a2_scale")] == pytest.approx(list(fp8.STATIC_AMAX))
    first = (quant["a1_scale"], quant["a2_scale"])
    op_fp8.sglang_pick(hidden, w1, w2, logits, weights)
    assert seen["config"] is None  # SGLang chooses, from its fp8_w8a8 file or its default
    # the same scale tensors every call: none made from host values inside a graph capture
    assert seen["quant"]["a1_scale"] is first[0] and seen["quant"]["w1_scale"] is quant["w1_scale"]
    op_fp8.table_1xm16n32k64g1w4s3_64xm64n128k64g1w8s3(hidden, w1, w2, logits, weights)
    assert seen["config"] == MoeConfig.from_code("m16n32k64g1w4s3")  # 3 tokens: the nearest key, 1


def test_the_reference_rounds_what_the_kernel_rounds_from_fp64_copies_too():
    w1, w2 = _weights()
    hidden = torch.randn(5, 64).to(torch.bfloat16)
    logits = torch.randn(5, 4)
    out64 = hidden.double()
    fp8.fused_moe_reference(out64, w1.double(), w2.double(), logits.double(), torch.empty(5, 2, dtype=torch.float64))
    # by hand: the op's quantization of the bf16 weights, the static scales on both GEMMs' inputs
    (q1, s1), (q2, s2) = fp8.quantize_experts(w1), fp8.quantize_experts(w2)
    a1, a2 = fp8.static_scales()
    expected = hidden.double()
    fused_moe(expected, fp8.dequantize(q1, s1).double(), fp8.dequantize(q2, s2).double(), logits.double(),
              torch.empty(5, 2, dtype=torch.float64), quant_in=lambda t: fp8.fake_quant(t, a1),
              quant_mid=lambda t: fp8.fake_quant(t, a2))
    assert torch.equal(out64, expected)
    # the rounding is real: the bf16 computation differs, within the spec's tolerance of the output's scale
    plain = hidden.double()
    fused_moe(plain, w1.double(), w2.double(), logits.double(), torch.empty(5, 2, dtype=torch.float64))
    tol = get_spec("fused_moe_fp8").tolerance["bfloat16"]
    diff = (out64 - plain).abs()
    assert 0 < diff.max() <= tol.atol + tol.rtol * plain.abs().max()


def test_an_fp8_shape_names_the_fp8_spec_and_ops():
    shape = MoeShape(8, 7168, 4096, 2, quant="fp8_w8a8")
    assert shape.spec == "fused_moe_fp8" and shape.op("sglang_pick") == "py:astra_sglang.triton.moe.op_fp8:sglang_pick"
    plain = MoeShape(8, 7168, 4096, 2)
    assert plain.spec == "fused_moe" and plain.op("config_x") == "py:astra_sglang.triton.moe.op:config_x"
    spec = get_spec("fused_moe_fp8")
    assert spec.dims == get_spec("fused_moe").dims and spec.dtypes == ["bfloat16"]
