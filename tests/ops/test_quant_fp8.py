"""The per-token-group FP8 quantization spec: an fp8 output and an fp32 scales output shaped by a free dim
that a scalar argument carries (group_size = group), drawn, referenced and compared on CPU; SGLang's call
(outputs allocated by the op and returned, the scales laid out by its keywords) bound by the patch layer, and
what that layer leaves to SGLang's op."""
from __future__ import annotations

import functools

import pytest
import torch

from astra_sglang.harness.compare import compare
from astra_sglang.harness.inputs import allocate, fill
from astra_sglang.patching.patched_op import PatchedOp
from astra_sglang.patching.stats import OpStats
from astra_sglang.references.quant import FP8_E4M3_MAX, allocate_scales, per_token_group_quant_fp8
from astra_sglang.specs.registry import get_spec

SHAPES = [(1, 128), (3, 384), (7, 2048), (33, 7168)]
LAYOUTS = [(False, False), (True, False), (True, True)]  # (column_major_scales, scale_tma_aligned)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("shape", SHAPES)
def test_reference_quantizes_each_group_to_full_fp8_range(shape, dtype):
    spec = get_spec("per_token_group_quant_fp8")
    args = fill(spec, allocate(spec, shape, dtype, "cpu"), torch.Generator().manual_seed(0))
    x, x_q, x_s = args.tensors
    assert args.scalars == [128, 1e-10, False, False]
    assert x_q.dtype == torch.float8_e4m3fn and x_s.shape == (shape[0], shape[1] // 128)
    ref = args.upcast()
    spec.reference_fn()(*ref.call_args(spec))
    got = args.clone()
    spec.reference_fn()(*got.call_args(spec))  # quantized into the real fp8 / fp32 outputs
    assert compare(spec, dtype, got, ref).ok
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


def test_zero_groups_get_the_eps_scale_and_zeros():
    x = torch.zeros(2, 256, dtype=torch.bfloat16)
    x[1, 128:] = torch.linspace(-3, 3, 128)
    x_q, x_s = torch.empty(2, 256, dtype=torch.float8_e4m3fn), torch.empty(2, 2)
    per_token_group_quant_fp8(x, 128, 1e-10, False, False, x_q, x_s)
    assert torch.equal(x_s[:, 0], torch.full((2,), 1e-10 / 448)) and not x_q[:, :128].float().any()
    assert x_s[1, 1].item() == pytest.approx(3 / 448) and x_q[1, 255].float().item() == 448


def _sglang_standin():
    """A CPU stand-in of SGLang 0.5.17's sglang_per_token_group_quant_fp8 with its signature (the binding reads
    it; SGLang itself does not import without its GPU stack): records each call, answers with the reference in
    SGLang's layouts."""
    calls = []

    def sglang_per_token_group_quant_fp8(x, group_size, eps=1e-10, column_major_scales=False, scale_tma_aligned=False,
                                         scale_ue8m0=False, fuse_silu_and_mul=False, masked_m=None):
        calls.append(dict(group_size=group_size, column_major_scales=column_major_scales, scale_ue8m0=scale_ue8m0,
                          fuse_silu_and_mul=fuse_silu_and_mul, masked=masked_m is not None, ndim=x.dim()))
        x2 = x.reshape(-1, x.shape[-1])
        x_q = torch.empty(x2.shape, dtype=torch.float8_e4m3fn)
        x_s = allocate_scales(x2, group_size, eps, column_major_scales, scale_tma_aligned)
        per_token_group_quant_fp8(x2.float(), group_size, eps, column_major_scales, scale_tma_aligned, x_q, x_s)
        return x_q.reshape(x.shape), x_s

    return sglang_per_token_group_quant_fp8, calls


def _op(original):
    stats = OpStats("per_token_group_quant_fp8")
    launched = []

    def launch(tensors, scalars):  # the kernel's contract on CPU: the reference, through the given buffers
        x, x_q, x_s = tensors
        launched.append((tuple(scalars), x_s.stride()))
        per_token_group_quant_fp8(x, int(scalars[0]), scalars[1], bool(scalars[2]), bool(scalars[3]), x_q, x_s)
        return 0

    op = PatchedOp(get_spec("per_token_group_quant_fp8"), launch, original, stats, dtypes=["bfloat16", "float16"],
                   device_type="cpu")
    return op, stats, launched


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("tokens", [1, 3, 17])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_calls_block_fp8_linear_layers_make_are_served_in_sglangs_layout(tokens, layout, dtype):
    """triton_w8a8_block_fp8_linear: (x, 128, column_major_scales=False); the DeepGEMM path on Hopper: (x, 128,
    column_major_scales=True, scale_tma_aligned=True, scale_ue8m0=False)."""
    original, calls = _sglang_standin()
    op, stats, launched = _op(original)
    x = (torch.randn(tokens, 384, generator=torch.Generator().manual_seed(tokens)) * 5).to(dtype)
    column_major, tma = layout
    got_q, got_s = op.fn(x, 128, column_major_scales=column_major, scale_tma_aligned=tma, scale_ue8m0=False)
    want_q, want_s = original(x, 128, column_major_scales=column_major, scale_tma_aligned=tma)
    assert stats.kernel_calls == 1 and stats.fallbacks == 0 and len(calls) == 1  # the one call above
    assert launched == [((128, 1e-10, column_major, tma), want_s.stride())]
    assert got_s.stride() == want_s.stride() and torch.equal(got_s, want_s)
    assert torch.equal(got_q.view(torch.uint8), want_q.view(torch.uint8))


def test_positional_call_allocates_and_returns_both_outputs():
    original, _ = _sglang_standin()
    op, stats, _ = _op(original)
    x = torch.randn(5, 256, dtype=torch.bfloat16)
    x_q, x_s = op.fn(x, 128)
    want_q, want_s = original(x, 128)
    assert x_q.dtype == torch.float8_e4m3fn and x_s.shape == (5, 2) and x_s.is_contiguous() and stats.kernel_calls == 1
    assert torch.equal(x_q.view(torch.uint8), want_q.view(torch.uint8)) and torch.equal(x_s, want_s)


@pytest.mark.parametrize("call, reason", [
    (lambda x: ((x, 32), {}), "dtype or shape not covered"),  # a 32-wide block: x_s 4x8, not the spec's 4x2
    (lambda x: ((x, 128), {"scale_ue8m0": True}), "argument scale_ue8m0 (not in the spec) given"),
    (lambda x: ((x, 128), {"column_major_scales": True, "scale_tma_aligned": True, "scale_ue8m0": True}),
     "argument scale_ue8m0 (not in the spec) given"),
    (lambda x: ((torch.cat([x, x], -1), 128), {"fuse_silu_and_mul": True}),
     "argument fuse_silu_and_mul (not in the spec) given"),
    (lambda x: ((x, 128), {"masked_m": torch.ones(1, dtype=torch.int32)}), "argument masked_m (not in the spec) given"),
    (lambda x: ((x.reshape(2, 2, 256), 128), {}), "output not allocatable (dims not solvable from the inputs)"),
    (lambda x: ((x.float(), 128), {}), "dtype or shape not covered"),
])
def test_what_the_kernel_does_not_cover_is_served_by_sglangs_op(call, reason):
    original, calls = _sglang_standin()
    op, stats, launched = _op(original)
    args, kwargs = call(torch.randn(4, 256, dtype=torch.bfloat16))
    op.fn(*args, **kwargs)
    assert not launched and stats.kernel_calls == 0 and stats.fallbacks == 1 and stats.reasons == {reason: 1}
    assert len(calls) == 1 and calls[0]["group_size"] == args[1]  # SGLang's op got the caller's own call


def _sglang_quantization_package(monkeypatch, shadowed: bool):
    """SGLang 0.5.17's sglang.kernels.ops.quantization as modules in sys.modules (it does not import on CPU): the
    package holds the function per_token_group_quant and the submodule of the same name defines the JIT kernel's
    function; `shadowed`: the state once SGLang's kernel registry imported that submodule (at the package function's
    first call), where the package's attribute is the submodule. Returns the calls each kernel function saw."""
    import sys
    import types

    calls = {"group": [], "token": []}
    package = types.ModuleType("sglang.kernels.ops.quantization")
    package.__path__ = []
    submodule = types.ModuleType("sglang.kernels.ops.quantization.per_token_group_quant")
    submodule.per_token_group_quant = lambda x, x_q, x_s, group_size: calls["group"].append(group_size)
    package.sgl_per_token_quant_fp8 = lambda x, x_q, x_s: calls["token"].append(x.shape)
    package.per_token_group_quant = submodule if shadowed else submodule.per_token_group_quant
    monkeypatch.setitem(sys.modules, package.__name__, package)
    monkeypatch.setitem(sys.modules, submodule.__name__, submodule)
    from astra_sglang.baselines import adapters

    monkeypatch.setattr(adapters, "_sglang_group_quant", functools.cache(adapters._sglang_group_quant.__wrapped__))
    return calls


@pytest.mark.parametrize("shadowed", [False, True])
def test_sglangs_group_quant_adapter_reaches_its_kernel_on_every_call(monkeypatch, shadowed):
    """The harness's SGLang baseline calls the JIT kernel function on every call, also once the package's attribute of
    its name is the submodule (the H200 run where every call after the first raised "'module' object is not
    callable" and the op's timed rows had no SGLang figure)."""
    from astra_sglang.baselines import adapters

    calls = _sglang_quantization_package(monkeypatch, shadowed)
    for tokens, layout in [(1, (False, False)), (3, (True, True)), (3, (True, False))]:
        x = torch.zeros(tokens, 256, dtype=torch.bfloat16)
        x_q, x_s = torch.empty(x.shape, dtype=torch.float8_e4m3fn), allocate_scales(x, 128, 1e-10, *layout)
        adapters.sglang_per_token_group_quant_fp8(x, 128, 1e-10, *layout, x_q, x_s)
    x = torch.zeros(2, 128, dtype=torch.bfloat16)  # one group per row: SGLang's per-token kernel
    adapters.sglang_per_token_group_quant_fp8(x, 128, 1e-10, False, False, torch.empty(x.shape, dtype=torch.float8_e4m3fn),
                                              torch.empty(2, 1))
    assert calls == {"group": [128, 128, 128], "token": [(2, 128)]}
