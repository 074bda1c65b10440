"""Patched ops bind SGLang's keyword calls by the original's signature: `apply_rope_with_cos_sin_cache_inplace(
positions=..., q=..., k=..., cos_sin_cache=..., is_neox=..., fused_args=None)` runs the kernel; a call the spec
cannot describe (fused_args given) is served by the original and counted with its reason."""
from __future__ import annotations

import pytest
import torch

from astra_sglang.patching.patched_op import PatchedOp
from astra_sglang.patching.stats import OpStats
from astra_sglang.references.rope import cos_sin_cache, rotary_embedding
from astra_sglang.specs.registry import get_spec

CALLS: list = []


def apply_rope_with_cos_sin_cache_inplace(q, k, cos_sin_cache, positions, *, is_neox, rope_dim=0,
                                          fused_args=None):
    """SGLang's signature (sglang.kernels.ops.attention.rope), computed by the fp64 reference."""
    CALLS.append(fused_args)
    rotary_embedding(q, k, cos_sin_cache, positions, is_neox, rope_dim)


def launcher(seen: list):
    def launch(tensors, scalars):
        seen.append(list(scalars))
        q, k, cache, positions = tensors
        rotary_embedding(q, k, cache, positions, *scalars)
        return 0
    return launch


def make():
    seen: list = []
    stats = OpStats("rotary_embedding")
    op = PatchedOp(get_spec("rotary_embedding"), launcher(seen), apply_rope_with_cos_sin_cache_inplace, stats,
                   device_type="cpu", seed=0)
    return op, stats, seen


def _inputs(tokens=3, heads=4, kv_heads=2, head_dim=64, max_pos=8192):
    gen = torch.Generator().manual_seed(0)
    return dict(positions=torch.randint(0, max_pos, (tokens,), generator=gen),
                q=torch.randn(tokens, heads, head_dim, generator=gen, dtype=torch.bfloat16),
                k=torch.randn(tokens, kv_heads, head_dim, generator=gen, dtype=torch.bfloat16),
                cos_sin_cache=cos_sin_cache((max_pos, head_dim), torch.float32, gen, {}).float())


def test_sglang_keyword_call_reaches_the_kernel():
    op, stats, seen = make()
    args = _inputs()
    want = {k: v.clone() for k, v in args.items()}
    apply_rope_with_cos_sin_cache_inplace(**want, is_neox=False)
    assert op.fn(**args, is_neox=False, fused_args=None) is None  # in place only: returns None
    assert (stats.calls, stats.kernel_calls, stats.fallbacks) == (1, 1, 0)
    assert seen == [[False, 0]]  # the keyword-only scalar reached the ABI, the default filled in
    assert torch.equal(args["q"], want["q"]) and torch.equal(args["k"], want["k"])


def test_max_pos_is_taken_from_the_cache_handed_in():
    op, stats, _ = make()
    op.fn(**_inputs(max_pos=300), is_neox=True)  # the spec's max_pos is 4096; the call's cache has 300 rows
    assert stats.kernel_calls == 1


def test_undescribed_argument_falls_back_with_its_reason():
    op, stats, seen = make()
    CALLS.clear()
    op.fn(**_inputs(), is_neox=True, fused_args=object())
    op.fn(**_inputs(), is_neox=True, fused_args=object())
    assert stats.fallbacks == 2 and not seen and len(CALLS) == 2 and None not in CALLS
    assert stats.reasons == {"argument fused_args (not in the spec) given": 2}
    assert stats.record().fallback_reasons == stats.reasons


def test_int32_positions_are_not_the_specs_dtype_and_fall_back():
    op, stats, _ = make()
    args = _inputs()
    args["positions"] = args["positions"].int()
    op.fn(**args, is_neox=True)
    assert stats.reasons == {"dtype or shape not covered": 1}


def test_custom_op_schema_types_scalars():
    from astra_sglang.patching.custom_op import schema

    text = schema(get_spec("rotary_embedding"))
    assert "bool is_neox" in text and "int rope_dim" in text and "Tensor(a!) q" in text


def test_a_call_forms_binding_is_planned_once_and_its_values_checked_every_call():
    op, stats, seen = make()
    CALLS.clear()
    op.fn(**_inputs(), is_neox=True, fused_args=None)
    op.fn(**_inputs(), is_neox=True, fused_args=object())  # same form: the plan's check still sees the value
    op.fn(**_inputs(), is_neox=True, fused_args=None)
    q = _inputs()
    op.fn(q.pop("q"), q.pop("k"), q.pop("cos_sin_cache"), q.pop("positions"), is_neox=False)  # another form
    assert len(op._plans) == 2 and (stats.kernel_calls, stats.fallbacks) == (3, 1)
    assert seen == [[True, 0], [True, 0], [False, 0]] and len(CALLS) == 1
    for _ in range(2):  # no such parameter: a miss for the form, every time; SGLang's function raises its own error
        with pytest.raises(TypeError, match="rotary_dim"):
            op.fn(**_inputs(), is_neox=True, rotary_dim=64)
    assert stats.reasons["call does not fit the original's signature: got an unexpected keyword argument "
                         "'rotary_dim'"] == 2
