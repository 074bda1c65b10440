"""On a GPU: the FP8 quant patch (patches/per_token_group_quant_fp8) against the fp64 reference and against the
kernel SGLang runs (bit for bit: the same arithmetic), in every scale layout, at odd token counts and widths, on
zero groups, large magnitudes and non-finite values; the harness's own checks; and the patched op in front of
SGLang's real function, eager and inside a CUDA graph."""
from __future__ import annotations

import pytest
import torch

from astra_sglang.harness.abi import KernelLibrary, Launcher
from astra_sglang.harness.build import build_library
from astra_sglang.harness.limits import FP8_TOLERANCE
from astra_sglang.paths import kernels_dir, patches_dir
from astra_sglang.references.quant import allocate_scales, per_token_group_quant_fp8

pytestmark = pytest.mark.gpu
OP = "per_token_group_quant_fp8"
TOKENS = [1, 3, 17, 300, 2048]
HIDDEN = [128, 384, 2048, 7168]
LAYOUTS = [(False, False), (True, False), (True, True)]  # (column_major_scales, scale_tma_aligned)
DTYPES = [torch.bfloat16, torch.float16]


@pytest.fixture(scope="module", params=["patch", "first"])
def kernel(request) -> Launcher:
    source = patches_dir() / OP / "kernel.cu" if request.param == "patch" else kernels_dir() / f"{OP}.cu"
    build = build_library(source)
    assert build.ok, build.log[-2000:]
    return Launcher(KernelLibrary(build.library), 3, 4)


def _quant(launch, x, layout, eps=1e-10):
    x_q = torch.empty(x.shape, device=x.device, dtype=torch.float8_e4m3fn)
    x_s = allocate_scales(x, 128, eps, *layout)
    assert launch([x, x_q, x_s], [128, eps, *layout]) == 0
    return x_q, x_s


def _assert_matches_reference(x, x_q, x_s, layout):
    want_q = torch.empty(x.shape, dtype=torch.float64, device=x.device)
    want_s = torch.empty(x_s.shape, dtype=torch.float64, device=x.device)
    per_token_group_quant_fp8(x, 128, 1e-10, *layout, want_q, want_s)
    torch.testing.assert_close(x_s.double(), want_s, atol=1e-12, rtol=1e-6)
    atol, rtol = FP8_TOLERANCE["float8_e4m3fn"]
    torch.testing.assert_close(x_q.double(), want_q, atol=atol, rtol=rtol)


def _input(tokens, hidden, dtype, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed * 7919 + tokens * 31 + hidden)
    x = torch.randn(tokens, hidden, device="cuda", generator=g) * torch.rand(tokens, 1, device="cuda", generator=g) * 8
    x[:, : min(hidden, 128)] *= 1e-3  # groups of very different magnitudes in one row
    return x.to(dtype)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", HIDDEN)
@pytest.mark.parametrize("tokens", TOKENS)
def test_kernels_match_the_fp64_reference(kernel, tokens, hidden, dtype, layout):
    x = _input(tokens, hidden, dtype)
    x_q, x_s = _quant(kernel, x, layout)
    torch.cuda.synchronize()
    _assert_matches_reference(x, x_q, x_s, layout)


def test_zero_groups_large_magnitudes_and_non_finite_values(kernel):
    x = _input(5, 1024, torch.bfloat16)
    x[0] = 0  # every group of a row zero: scale eps / 448, zeros
    x[1, :128] = 0
    x[2] *= 3e4  # large, finite
    # amax near the top, every value finite: float powers (int64 2**k overflows past k = 62, making 64 infinities)
    x[3, 128:256] = torch.finfo(torch.bfloat16).max / 2.0 ** torch.arange(128, device="cuda", dtype=torch.float32)
    assert torch.isfinite(x).all()
    x_q, x_s = _quant(kernel, x, (False, False))
    torch.cuda.synchronize()
    _assert_matches_reference(x, x_q, x_s, (False, False))
    assert torch.equal(x_s[0], torch.full_like(x_s[0], 1e-10 / 448)) and not x_q[0].float().any()


def test_patch_never_writes_an_fp8_nan():
    build = build_library(patches_dir() / OP / "kernel.cu")
    launch = Launcher(KernelLibrary(build.library), 3, 4)
    y = _input(1, 1024, torch.bfloat16)
    y[0, 5], y[0, 200], y[0, 300] = float("inf"), float("-inf"), float("nan")
    y_q, _ = _quant(launch, y, (False, False))
    torch.cuda.synchronize()
    # Never an fp8 NaN code (SGLang's kernel's rule: a NaN would poison the GEMM): NaN is clamped to 448, and an
    # infinite amax makes the groups' multiplier 0, so +-inf * 0 is NaN, clamped to 448 too.
    assert not torch.isnan(y_q.float()).any()
    assert y_q[0, 5].float().item() == 448 and y_q[0, 200].float().item() == 448 and y_q[0, 300].float().item() == 448


def test_views_with_row_gaps(kernel):
    """x a slice of a wider buffer (rows 16-byte aligned), as a fused QKV split hands it over."""
    wide = _input(9, 1024 + 256, torch.bfloat16)
    x = wide[:, :1024]
    x_q, x_s = _quant(kernel, x, (True, True))
    torch.cuda.synchronize()
    _assert_matches_reference(x, x_q, x_s, (True, True))


def test_declines_what_it_does_not_cover():
    build = build_library(patches_dir() / OP / "kernel.cu")
    launch = Launcher(KernelLibrary(build.library), 3, 4)
    x = _input(4, 256, torch.bfloat16)
    q = torch.empty(4, 256, device="cuda", dtype=torch.float8_e4m3fn)
    assert launch([x, q, torch.empty(4, 8, device="cuda")], [32, 1e-10, False, False]) == -1  # group 32
    assert launch([x.float(), q, torch.empty(4, 2, device="cuda")], [128, 1e-10, False, False]) == -1  # fp32 x
    assert launch([x, q, torch.empty(4, 2, device="cuda")], [128, 0.0, False, False]) == -1  # eps 0
    bad_q = torch.empty(4 * 256 + 8, device="cuda", dtype=torch.float8_e4m3fn)[8:].view(4, 256)
    assert launch([x, bad_q, torch.empty(4, 2, device="cuda")], [128, 1e-10, False, False]) == -1  # 8-byte aligned


def _sglang():
    """SGLang's JIT kernel function, from its defining module (the package's attribute of that name turns into
    the submodule once SGLang's registry imports it: astra_sglang/baselines/adapters.py)."""
    return pytest.importorskip("sglang.kernels.ops.quantization.per_token_group_quant").per_token_group_quant


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", HIDDEN)
@pytest.mark.parametrize("tokens", TOKENS)
def test_patch_is_bit_identical_to_sglangs_kernel(tokens, hidden, dtype, layout):
    """SGLang's JIT per_token_group_quant, which its sglang_per_token_group_quant_fp8 runs on CUDA."""
    per_token_group_quant = _sglang()
    build = build_library(patches_dir() / OP / "kernel.cu")
    launch = Launcher(KernelLibrary(build.library), 3, 4)
    x = _input(tokens, hidden, dtype, seed=1)
    x_q, x_s = _quant(launch, x, layout)
    want_q = torch.empty_like(x_q)
    want_s = allocate_scales(x, 128, 1e-10, *layout)
    per_token_group_quant(x, want_q, want_s, 128)
    torch.cuda.synchronize()
    assert torch.equal(x_s, want_s)
    assert torch.equal(x_q.view(torch.uint8), want_q.view(torch.uint8))


@pytest.mark.parametrize("tokens", [1, 3, 4, 17, 300])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_scales_are_laid_out_as_sglang_lays_them_out(tokens, layout):
    fp8_kernel = pytest.importorskip("sglang.kernels.ops.quantization.fp8_kernel")
    x = torch.empty(tokens, 7168, device="cuda", dtype=torch.bfloat16)
    ours = allocate_scales(x, 128, 1e-10, *layout)
    theirs = fp8_kernel.create_per_token_group_quant_fp8_output_scale(
        x_shape=x.shape, device=x.device, group_size=128, column_major_scales=layout[0], scale_tma_aligned=layout[1],
        scale_ue8m0=False)
    assert ours.shape == theirs.shape and ours.stride() == theirs.stride() and ours.dtype == theirs.dtype
    assert ours.untyped_storage().nbytes() == theirs.untyped_storage().nbytes()


def _patched_sglang():
    """The patch in front of SGLang's real sglang_per_token_group_quant_fp8 (its C++ fast path declines fp8
    outputs, so calls take the Python path)."""
    fp8_utils = pytest.importorskip("sglang.srt.layers.quantization.fp8_utils")
    from astra_sglang.patching.patched_op import PatchedOp
    from astra_sglang.patching.stats import OpStats
    from astra_sglang.specs.registry import get_spec

    build = build_library(patches_dir() / OP / "kernel.cu")
    stats = OpStats(OP)
    original = fp8_utils.sglang_per_token_group_quant_fp8
    op = PatchedOp(get_spec(OP), Launcher(KernelLibrary(build.library), 3, 4), original, stats,
                   dtypes=["bfloat16", "float16"])
    return op, original, stats


@pytest.mark.parametrize("tokens", [1, 17, 300])
@pytest.mark.parametrize("kwargs", [{}, {"column_major_scales": False},
                                    {"column_major_scales": True, "scale_tma_aligned": True, "scale_ue8m0": False}])
def test_patched_sglang_calls_match_sglang(tokens, kwargs):
    """The calls block-FP8 linear layers make (Triton GEMM path; DeepGEMM on Hopper), as SGLang makes them."""
    op, original, stats = _patched_sglang()
    x = _input(tokens, 7168, torch.bfloat16, seed=2)
    got_q, got_s = op.fn(x, 128, **kwargs)
    want_q, want_s = original(x, 128, **kwargs)
    torch.cuda.synchronize()
    assert stats.kernel_calls == 1 and stats.fallbacks == 0
    assert got_s.shape == want_s.shape and got_s.stride() == want_s.stride() and torch.equal(got_s, want_s)
    assert torch.equal(got_q.view(torch.uint8), want_q.view(torch.uint8))


def test_patched_call_captures_into_a_cuda_graph():
    op, original, stats = _patched_sglang()
    x = _input(16, 7168, torch.bfloat16, seed=3)
    kwargs = {"column_major_scales": True, "scale_tma_aligned": True, "scale_ue8m0": False}
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        op.fn(x, 128, **kwargs)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        got_q, got_s = op.fn(x, 128, **kwargs)
    x.copy_(_input(16, 7168, torch.bfloat16, seed=4))
    graph.replay()
    want_q, want_s = original(x, 128, **kwargs)
    torch.cuda.synchronize()
    assert torch.equal(got_s, want_s) and torch.equal(got_q.view(torch.uint8), want_q.view(torch.uint8))
    assert stats.fallbacks == 0


def test_harness_checks_the_patch_on_every_shape_set():
    from astra_sglang.harness.isolate import evaluate
    from astra_sglang.harness.records import EvalRequest, KernelSource
    from astra_sglang.specs.registry import get_spec, resolve_shapes

    spec = get_spec(OP)
    shapes = resolve_shapes(spec, "quick+edge+held_out")
    result = evaluate(EvalRequest(kernel=OP, candidate=KernelSource(path=str(patches_dir() / OP / "kernel.cu")),
                                  shapes=shapes, dtypes=spec.dtypes, time=False, timeout_s=900))
    assert result.ok, result.reason
    assert len(result.shapes) == len(shapes) * len(spec.dtypes) and all(s.correct for s in result.shapes)
