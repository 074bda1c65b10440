"""The rotary-embedding spec: its fp64 reference against SGLang's own forward_native (run from the installed
SGLang's source, since RotaryEmbedding needs a server's runtime context to construct), the harness's draws
(int64 positions below max_pos, a real cos/sin cache) and the patch layer's keyword binding of SGLang's call."""
from __future__ import annotations

import ast
import importlib.util
import types
from pathlib import Path

import pytest
import torch

from astra_sglang.harness.compare import compare
from astra_sglang.harness.inputs import allocate, fill
from astra_sglang.references.rope import cos_sin_cache, rotary_embedding
from astra_sglang.specs.registry import get_spec

SHAPES = [(1, 1, 1, 64), (3, 5, 1, 64), (7, 4, 2, 128), (2, 3, 3, 256)]


def _sglang_functions() -> dict:
    """SGLang's apply_rotary_emb and RotaryEmbedding.forward_native, compiled from the installed source."""
    spec = importlib.util.find_spec("sglang")
    if spec is None:
        pytest.skip("sglang not installed")
    root = Path(spec.submodule_search_locations[0]) / "srt" / "layers" / "rotary_embedding"
    namespace: dict = {"torch": torch, "Optional": object, "Tuple": tuple, "FusedSetKVBufferArg": object}
    utils = ast.parse((root / "utils.py").read_text())
    base = ast.parse((root / "base.py").read_text())
    fn = next(n for n in utils.body if isinstance(n, ast.FunctionDef) and n.name == "apply_rotary_emb")
    cls = next(n for n in base.body if isinstance(n, ast.ClassDef) and n.name == "RotaryEmbedding")
    native = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "forward_native")
    for node in (fn, native):
        node.decorator_list = []
        exec(compile(ast.Module([node], []), str(root), "exec"), namespace)  # noqa: S102 - SGLang's own source
    return namespace


@pytest.mark.parametrize("is_neox", [True, False])
@pytest.mark.parametrize("shape", SHAPES)
def test_reference_matches_sglang_forward_native(shape, is_neox):
    tokens, heads, kv_heads, head_dim = shape
    fns = _sglang_functions()
    gen = torch.Generator().manual_seed(0)
    cache = cos_sin_cache((4096, head_dim), torch.float32, gen, {}).float()
    layer = types.SimpleNamespace(cos_sin_cache=cache, head_size=head_dim, rotary_dim=head_dim,
                                  is_neox_style=is_neox, _apply_rotary_emb_wrapped=fns["apply_rotary_emb"])
    positions = torch.randint(0, 4096, (tokens,), generator=gen)
    q = torch.randn(tokens, heads, head_dim, generator=gen, dtype=torch.float64)
    k = torch.randn(tokens, kv_heads, head_dim, generator=gen, dtype=torch.float64)
    want_q, want_k = fns["forward_native"](layer, positions, q.reshape(tokens, -1).float().double(),
                                           k.reshape(tokens, -1).double())
    got_q, got_k = q.clone(), k.clone()
    rotary_embedding(got_q, got_k, cache.double(), positions, is_neox=is_neox)
    assert torch.allclose(got_q.reshape(tokens, -1), want_q, atol=1e-5)
    assert torch.allclose(got_k.reshape(tokens, -1), want_k, atol=1e-5)


def test_cache_matches_sglangs_formula():
    cache = cos_sin_cache((16, 8), torch.float32, torch.Generator(), {})
    inv = 1.0 / (10000 ** (torch.arange(0, 8, 2, dtype=torch.float64) / 8))
    assert torch.allclose(cache[5, :4], (5 * inv).cos()) and torch.allclose(cache[5, 4:], (5 * inv).sin())


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("shape", SHAPES)
def test_harness_draws_and_checks_the_spec(shape, dtype):
    spec = get_spec("rotary_embedding")
    args = fill(spec, allocate(spec, shape, dtype, "cpu"), torch.Generator().manual_seed(1))
    q, k, cache, positions = args.tensors
    assert positions.dtype == torch.int64 and 0 <= int(positions.min()) and int(positions.max()) < 4096
    assert cache.dtype == torch.float32 and cache.shape == (4096, shape[3]) and float(cache[0, 0]) == 1.0
    assert args.scalars == [True, 0] and q.dtype == getattr(torch, dtype)
    ref = args.upcast()
    assert ref.tensors[3].dtype == torch.int64  # indices stay integers for the reference
    spec.reference_fn()(*ref.call_args(spec))
    got = args.clone()
    got.call(spec.reference_fn(), spec)  # keyword-only is_neox / rope_dim passed by name
    assert compare(spec, dtype, got, ref).ok
    assert not compare(spec, dtype, args, ref).ok  # unrotated q fails


def test_spec_targets_name_sglangs_binding():
    from astra_sglang.extraction.static_targets import static_check
    from astra_sglang.patchset.manifest import Target

    if importlib.util.find_spec("sglang") is None:
        pytest.skip("sglang not installed")
    for t in get_spec("rotary_embedding").sglang_targets:
        assert static_check(Target(t.module, t.attr)).status == "ok"


def test_cost_counts_the_cache_rows_read_not_the_whole_cache():
    from astra_sglang.harness.cost import shape_cost

    spec = get_spec("rotary_embedding")
    one = shape_cost(spec, (1, 32, 8, 128), "bfloat16")
    assert one.bytes == 2 * 40 * 128 * 2 + 8 + 128 * 4 < spec.min_bytes((1, 32, 8, 128), "bfloat16")
    assert shape_cost(spec, (8192, 32, 8, 128), "bfloat16").bytes == 2 * 8192 * 40 * 128 * 2 + 8192 * 8 + 4096 * 512
