"""On a GPU: the rotary-embedding kernels (the shipped patch and the tool's reference kernel) through the ABI against
the fp64 reference at odd shapes (tokens 1/3/17/300/2048, q heads 1/5/32, kv heads 1/4/8, head_dim 64/128/256, neox
and GPT-J, bf16/fp16) in three layouts: contiguous q / k, SGLang's strided views of one qkv projection, and partial
rotary (a [..., :rot] slice of each head, or rope_dim below the head width); then against SGLang's own op where it
imports, through the harness, and through the live patch at SGLang's keyword call."""
from __future__ import annotations

import functools
import importlib.util

import pytest
import torch

from astra_sglang.harness.abi import KernelLibrary, Launcher
from astra_sglang.harness.build import build_library
from astra_sglang.kernels.variants import first_kernel
from astra_sglang.patchset.manifest import PatchManifest
from astra_sglang.paths import patches_dir
from astra_sglang.references.rope import cos_sin_cache, rotary_embedding
from astra_sglang.specs.registry import get_spec

pytestmark = pytest.mark.gpu
OP, MAX_POS = "rotary_embedding", 4096
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}
TOKENS = [1, 3, 17, 300, 2048]
HEADS = [(1, 1), (5, 4), (32, 8)]
HEAD_DIMS = [64, 128, 256]


def _patch_path() -> str:
    manifest = PatchManifest.load(patches_dir() / OP)
    return str((patches_dir() / OP / manifest.kernel).resolve())


KERNELS = {"patch": _patch_path, "first": lambda: str(first_kernel(OP)[0])}


@functools.cache
def _launcher(which: str) -> Launcher:
    build = build_library(KERNELS[which]())
    assert build.ok, build.log[-2000:]
    return Launcher(KernelLibrary(build.library), 4, 2)


def _inputs(tokens, heads, kv_heads, head_size, rot, dtype, layout, seed=0):
    """(base tensor, q, k, cache, positions): q / k [tokens, heads, width] laid out as `layout` says."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    t = DTYPES[dtype]
    if layout == "contiguous":
        base = torch.randn(tokens, (heads + kv_heads) * head_size, generator=gen, device="cuda", dtype=t)
        q, k = base.split([heads * head_size, kv_heads * head_size], dim=-1)
        q, k = q.contiguous().view(tokens, heads, head_size), k.contiguous().view(tokens, kv_heads, head_size)
        base = None
    else:  # "qkv" / "slice": views of Llama's qkv projection, as RotaryEmbedding.forward_cuda makes them
        base = torch.randn(tokens, (heads + 2 * kv_heads) * head_size, generator=gen, device="cuda", dtype=t)
        q, k, _ = base.split([heads * head_size, kv_heads * head_size, kv_heads * head_size], dim=-1)
        q, k = q.view(tokens, heads, head_size), k.view(tokens, kv_heads, head_size)
        if layout == "slice":
            q, k = q[..., :rot], k[..., :rot]
    cache = cos_sin_cache((MAX_POS, rot), torch.float32, gen, {}).float()
    positions = torch.randint(0, MAX_POS, (tokens,), generator=gen, device="cuda")
    return base, q, k, cache, positions


def _check(which, tokens, heads, kv_heads, head_size, rot, dtype, layout, is_neox, rope_dim=0):
    base, q, k, cache, positions = _inputs(tokens, heads, kv_heads, head_size, rot, dtype, layout)
    before = base.clone() if base is not None else None
    want_q, want_k = q.double(), k.double()
    rotary_embedding(want_q, want_k, cache.double(), positions, is_neox, rope_dim)
    assert _launcher(which)([q, k, cache, positions], [float(is_neox), float(rope_dim)]) == 0
    torch.cuda.synchronize()
    tol = get_spec(OP).tolerance[dtype]
    torch.testing.assert_close(q.double(), want_q, atol=tol.atol, rtol=tol.rtol)
    torch.testing.assert_close(k.double(), want_k, atol=tol.atol, rtol=tol.rtol)
    if rope_dim:  # the features past rope_dim untouched, bit for bit
        assert torch.equal(q[..., rope_dim:], want_q[..., rope_dim:].to(q.dtype))
    if base is not None:  # v, and each head's unrotated tail, untouched bit for bit
        width = (heads + kv_heads) * head_size
        assert torch.equal(base[:, width:], before[:, width:])
        if layout == "slice":
            heads_view = base[:, :width].view(tokens, heads + kv_heads, head_size)
            assert torch.equal(heads_view[..., rot:], before[:, :width].view(tokens, -1, head_size)[..., rot:])


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
@pytest.mark.parametrize("heads, kv_heads", HEADS)
@pytest.mark.parametrize("tokens", TOKENS)
@pytest.mark.parametrize("layout", ["contiguous", "qkv"])
@pytest.mark.parametrize("which", list(KERNELS))
def test_kernels_match_the_fp64_reference(which, layout, tokens, heads, kv_heads, head_dim, is_neox, dtype):
    _check(which, tokens, heads, kv_heads, head_dim, head_dim, dtype, layout, is_neox)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize("tokens, heads, kv_heads, head_size, rot", [
    (3, 5, 1, 128, 64), (17, 32, 8, 128, 64), (300, 4, 4, 256, 128), (7, 32, 8, 256, 64), (2, 6, 2, 64, 32),
    (5, 3, 1, 128, 96), (9, 2, 1, 128, 36), (4, 3, 2, 64, 14)])
@pytest.mark.parametrize("which", list(KERNELS))
def test_partial_rotary_slices_leave_the_rest_of_each_head(which, tokens, heads, kv_heads, head_size, rot, is_neox,
                                                           dtype):
    """rot 36 / 14: 16-byte slots no longer divide the half (neox 4 and 2 bytes) or the width (GPT-J 8 and 4
    bytes): the narrower accesses serve them."""
    _check(which, tokens, heads, kv_heads, head_size, rot, dtype, "slice", is_neox)


@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize("tokens, heads, kv_heads, head_size, rope_dim", [(3, 5, 1, 128, 64), (17, 32, 8, 256, 64)])
@pytest.mark.parametrize("which", list(KERNELS))
def test_rope_dim_below_the_head_width(which, tokens, heads, kv_heads, head_size, rope_dim, is_neox):
    _check(which, tokens, heads, kv_heads, head_size, rope_dim, "bfloat16", "contiguous", is_neox, rope_dim)


def test_unsupported_layouts_are_declined():
    _, q, k, cache, positions = _inputs(3, 4, 2, 128, 128, "bfloat16", "contiguous")
    lib = _launcher("patch")
    assert lib([q, k, cache, positions.int()], [1.0, 0.0]) == -1  # int32 positions: not the spec's
    assert lib([q.float(), k.float(), cache, positions], [1.0, 0.0]) == -1  # fp32 activations
    assert lib([q, k, cache.half(), positions], [1.0, 0.0]) == -1  # a cache that is not fp32
    assert lib([q, k, cache, positions], [1.0, 130.0]) == -1  # wider than the head
    assert lib([q.transpose(1, 2).contiguous().transpose(1, 2), k, cache, positions], [1.0, 0.0]) == -1  # strided features
    torch.cuda.synchronize()


def _sglang_rope():
    if importlib.util.find_spec("sglang") is None or importlib.util.find_spec("tvm_ffi") is None:
        pytest.skip("SGLang's JIT rope needs sglang and tvm_ffi")
    from astra_sglang.baselines.adapters import sglang_rotary_embedding

    return sglang_rotary_embedding


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize("tokens, heads, kv_heads, head_dim", [(1, 32, 8, 128), (17, 32, 8, 128), (300, 28, 4, 128),
                                                                (3, 5, 1, 64), (33, 16, 8, 256)])
def test_patch_matches_sglangs_op_on_qkv_views(tokens, heads, kv_heads, head_dim, is_neox, dtype):
    sglang = _sglang_rope()
    ours = _inputs(tokens, heads, kv_heads, head_dim, head_dim, dtype, "qkv")
    theirs = _inputs(tokens, heads, kv_heads, head_dim, head_dim, dtype, "qkv")
    assert _launcher("patch")([*ours[1:]], [float(is_neox), 0.0]) == 0
    sglang(*theirs[1:], is_neox, 0)
    torch.cuda.synchronize()
    tol = get_spec(OP).tolerance[dtype]
    torch.testing.assert_close(ours[0], theirs[0], atol=tol.atol, rtol=tol.rtol)


def test_harness_passes_the_patch_everywhere_against_the_reference_kernel():
    from astra_sglang.harness.isolate import evaluate
    from astra_sglang.harness.records import EvalRequest, KernelSource
    from astra_sglang.specs.registry import resolve_shapes

    spec = get_spec(OP)
    shapes = resolve_shapes(spec, "quick+edge+held_out")
    result = evaluate(EvalRequest(kernel=OP, candidate=KernelSource(path=_patch_path(), label=f"patches/{OP}"),
                                  baseline=KernelSource(path=str(first_kernel(OP)[0])), shapes=shapes,
                                  dtypes=spec.dtypes, time=False, timeout_s=900))
    assert result.ok, result.reason
    assert len(result.shapes) == len(shapes) * len(spec.dtypes) and all(s.correct for s in result.shapes)


def test_harness_times_the_patch_against_sglangs_op():
    from astra_sglang.baselines.adapters import KERNEL_BASELINES
    from astra_sglang.harness.isolate import evaluate
    from astra_sglang.harness.records import EvalRequest, KernelSource
    from astra_sglang.specs.registry import resolve_shapes

    _sglang_rope()
    spec = get_spec(OP)
    result = evaluate(EvalRequest(kernel=OP, candidate=KernelSource(path=_patch_path(), label=f"patches/{OP}"),
                                  baseline=KernelSource(path=KERNEL_BASELINES[OP]), shapes=resolve_shapes(spec, "quick"),
                                  dtypes=["bfloat16"], time=True, timeout_s=900))
    assert result.ok, result.reason
    assert all(s.covered and s.correct and s.speedup for s in result.shapes)


def test_live_patch_serves_sglangs_keyword_call():
    """The patched op with the built kernel at SGLang's call: keywords, positions first, strided qkv views."""
    from astra_sglang.patching.patched_op import PatchedOp
    from astra_sglang.patching.stats import OpStats

    def original(q, k, cos_sin_cache, positions, *, is_neox, rope_dim=0, fused_args=None):
        rotary_embedding(q, k, cos_sin_cache, positions, is_neox, rope_dim)

    stats = OpStats(OP)
    op = PatchedOp(get_spec(OP), _launcher("patch"), original, stats, seed=0)
    base, q, k, cache, positions = _inputs(17, 32, 8, 128, 128, "bfloat16", "qkv")
    want = _inputs(17, 32, 8, 128, 128, "bfloat16", "qkv")
    original(*want[1:], is_neox=True)
    for _ in range(2):  # the second call takes the cached coverage verdict
        op.fn(positions=positions, q=q, k=k, cos_sin_cache=cache, is_neox=True, fused_args=None)
        original(*want[1:], is_neox=True)
    torch.cuda.synchronize()
    assert (stats.kernel_calls, stats.fallbacks) == (2, 0)
    tol = get_spec(OP).tolerance["bfloat16"]
    torch.testing.assert_close(base, want[0], atol=2 * tol.atol, rtol=2 * tol.rtol)
