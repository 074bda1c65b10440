"""The rotary-embedding patch at SGLang's real call site, on CPU: RotaryEmbedding.forward_cuda and
apply_rope_with_cos_sin_cache_inplace compiled from the installed SGLang's source (their kernels stood in for by the
fp64 reference), the patch in between. forward_cuda's keyword call with q / k as strided views of one qkv projection
(Llama-3-8B: 32 q heads, 8 kv heads, head_dim 128, neox) reaches the kernel with those views as they lie; a partial
rotary slice too; fused_args, an unsupported rotary width and int32 positions are served by SGLang's function."""
from __future__ import annotations

import ast
import importlib.util
import types
from pathlib import Path

import pytest
import torch

from astra_sglang.patching.patched_op import PatchedOp
from astra_sglang.patching.stats import OpStats
from astra_sglang.references.rope import cos_sin_cache, rotary_embedding
from astra_sglang.specs.registry import get_spec

MAX_POS = 4096


def _function(path: Path, name: str, cls: str | None = None) -> ast.FunctionDef:
    tree = ast.parse(path.read_text())
    body = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls).body if cls else tree.body
    node = next(n for n in body if isinstance(n, ast.FunctionDef) and n.name == name)
    node.decorator_list = []
    return node


def _compiled(node: ast.FunctionDef, namespace: dict, where: Path):
    exec(compile(ast.Module([node], []), str(where), "exec"), namespace)  # noqa: S102 - SGLang's own source
    return namespace[node.name]


class Sglang:
    """SGLang's entry point (its dispatch on fused_args) with its two kernels recorded and computed by the reference,
    and forward_cuda calling whatever `entry` is set to (the patched function)."""

    def __init__(self) -> None:
        spec = importlib.util.find_spec("sglang")
        if spec is None:
            pytest.skip("sglang not installed")
        root = Path(spec.submodule_search_locations[0])
        self.kernel_calls: list[str] = []
        ns = {"torch": torch, "apply_rope_inplace": self._rope, "apply_rope_inplace_with_kvcache": self._rope_store}
        self.original = _compiled(_function(root / "kernels/ops/attention/rope.py",
                                            "apply_rope_with_cos_sin_cache_inplace"), ns, root)
        self._ns = {"torch": torch}
        self._forward = _compiled(_function(root / "srt/layers/rotary_embedding/base.py", "forward_cuda",
                                            "RotaryEmbedding"), self._ns, root)

    def _rope(self, q, k, cos_sin_cache, positions, *, is_neox, rope_dim=0):
        self.kernel_calls.append("rope")
        rotary_embedding(q, k, cos_sin_cache, positions, is_neox, rope_dim)

    def _rope_store(self, q, k, *args, **kwargs):
        self.kernel_calls.append("rope+store")

    def forward_cuda(self, entry, layer, positions, query, key, fused=None):
        self._ns["apply_rope_with_cos_sin_cache_inplace"] = entry
        return self._forward(layer, positions, query, key, fused_set_kv_buffer_arg=fused)


def _launcher(seen: list):
    def launch(tensors, scalars):
        seen.append(([(tuple(t.shape), t.stride()) for t in tensors], list(scalars)))
        q, k, cache, positions = tensors
        rotary_embedding(q, k, cache, positions, *scalars)
        return 0
    return launch


def _layer(head_size: int, rotary_dim: int, is_neox: bool = True):
    gen = torch.Generator().manual_seed(0)
    cache = cos_sin_cache((MAX_POS, rotary_dim), torch.float32, gen, {}).float()
    return types.SimpleNamespace(use_fallback_kernel=False, head_size=head_size, rotary_dim=rotary_dim,
                                 cos_sin_cache=cache, is_neox_style=is_neox)


def _qkv(tokens: int, heads: int, kv_heads: int, head_size: int, dtype=torch.bfloat16, seed: int = 1):
    """Llama's attention input: q, k, v split off one projection row, so q and k are strided views."""
    gen = torch.Generator().manual_seed(seed)
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * head_size, generator=gen, dtype=dtype)
    q, k, _ = qkv.split([heads * head_size, kv_heads * head_size, kv_heads * head_size], dim=-1)
    return qkv, q, k, torch.randint(0, MAX_POS, (tokens,), generator=gen)


def _setup(dtypes=None):
    sglang, seen, stats = Sglang(), [], OpStats("rotary_embedding")
    op = PatchedOp(get_spec("rotary_embedding"), _launcher(seen), sglang.original, stats, device_type="cpu", seed=0,
                   dtypes=dtypes)
    return sglang, op, stats, seen


@pytest.mark.parametrize("tokens, heads, kv_heads, head_size, rotary_dim, is_neox", [
    (1, 32, 8, 128, 128, True), (17, 32, 8, 128, 128, True), (5, 32, 8, 128, 128, False),
    (3, 5, 1, 256, 256, True), (7, 4, 4, 128, 64, True), (2, 6, 2, 256, 128, False)])
def test_forward_cuda_keyword_call_reaches_the_kernel_with_sglangs_views(tokens, heads, kv_heads, head_size,
                                                                         rotary_dim, is_neox):
    sglang, op, stats, seen = _setup()
    layer = _layer(head_size, rotary_dim, is_neox)
    qkv, q, k, positions = _qkv(tokens, heads, kv_heads, head_size)
    want_qkv, want_q, want_k, _ = _qkv(tokens, heads, kv_heads, head_size)
    sglang.forward_cuda(sglang.original, layer, positions, want_q, want_k)  # SGLang unpatched
    assert sglang.kernel_calls == ["rope"]
    out = sglang.forward_cuda(op.fn, layer, positions, q, k)
    assert (stats.calls, stats.kernel_calls, stats.fallbacks) == (1, 1, 0) and sglang.kernel_calls == ["rope"]
    assert out[0] is q and out[1] is k
    row = (heads + 2 * kv_heads) * head_size  # the views' token stride: q / k were never copied
    tensors, scalars = seen[0]
    assert scalars == [is_neox, 0] and tensors[2:] == [((MAX_POS, rotary_dim), (rotary_dim, 1)), ((tokens,), (1,))]
    for (shape, stride), n in zip(tensors[:2], (heads, kv_heads)):
        assert shape == (tokens, n, rotary_dim) and stride[1:] == (head_size, 1)
        assert tokens == 1 or stride[0] == row  # a size-1 dim's stride is whatever torch's view gives it
    assert torch.equal(qkv, want_qkv)  # rotated in place, v and the unrotated features untouched


def test_fused_kv_store_is_served_by_sglang():
    sglang, op, stats, seen = _setup()
    _, q, k, positions = _qkv(3, 32, 8, 128)
    fused = types.SimpleNamespace(value=None, k_buffer=None, v_buffer=None, cache_loc=None)
    sglang.forward_cuda(op.fn, _layer(128, 128), positions, q, k, fused=fused)
    assert not seen and sglang.kernel_calls == ["rope+store"]
    assert stats.reasons == {"argument fused_args (not in the spec) given": 1}


@pytest.mark.parametrize("head_size, rotary_dim", [(128, 32), (96, 96), (80, 80)])
def test_rotary_widths_outside_the_spec_are_served_by_sglang(head_size, rotary_dim):
    """SGLang takes this path for head sizes 64/128/256/512; a partial rotary width outside them, or a head size
    whose forward_cuda path was forced, stays SGLang's."""
    sglang, op, stats, seen = _setup()
    _, q, k, positions = _qkv(3, 8, 2, head_size)
    sglang.forward_cuda(op.fn, _layer(head_size, rotary_dim), positions, q, k)
    assert not seen and sglang.kernel_calls == ["rope"]
    assert stats.reasons == {"dtype or shape not covered": 1}


def test_int32_positions_and_fp32_activations_are_served_by_sglang():
    sglang, op, stats, seen = _setup()
    _, q, k, positions = _qkv(3, 32, 8, 128)
    sglang.forward_cuda(op.fn, _layer(128, 128), positions.int(), q, k)
    _, q, k, positions = _qkv(3, 32, 8, 128, dtype=torch.float32)
    sglang.forward_cuda(op.fn, _layer(128, 128), positions, q, k)
    assert not seen and sglang.kernel_calls == ["rope", "rope"]
    assert stats.reasons == {"dtype or shape not covered": 2}


def test_sglang_call_sites_match_the_signature_the_binding_uses():
    """Every CUDA call site of the target passes the keywords the binding maps (base.py's forward_cuda); mrope's
    older sgl_kernel-style call (query=, key=, head_size=) does not fit the signature and is served by SGLang."""
    sglang, op, stats, seen = _setup()
    _, q, k, positions = _qkv(2, 4, 1, 64)
    cache = _layer(64, 64).cos_sin_cache
    with pytest.raises(TypeError):
        op.fn(positions=positions, query=q, key=k, head_size=64, cos_sin_cache=cache, is_neox=True)
    assert not seen and list(stats.reasons) == [next(iter(stats.reasons))]
    assert next(iter(stats.reasons)).startswith("call does not fit the original's signature")
