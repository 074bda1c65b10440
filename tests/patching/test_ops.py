"""PatchedOp: SGLang calling conventions, fallbacks, shadow validation, torch.compile (host cost: benchmarks/launcher_overhead.py)."""
from __future__ import annotations

import pytest
import torch
from spawn_children import standin_launcher

from astra_sglang.patching.patched_op import ASTRA_UNSUPPORTED, PatchedOp
from astra_sglang.patching.stats import OpStats
from astra_sglang.references import small_ops as reference
from astra_sglang.specs.registry import get_spec


def silu_original(input, out=None):
    if out is None:
        out = input.new_empty(*input.shape[:-1], input.shape[-1] // 2)
    reference.silu_and_mul(input, out)
    return out


def make(launcher, original=silu_original, op="silu_and_mul", **kw):
    stats = OpStats(op)
    return PatchedOp(get_spec(op), launcher, original, stats, device_type="cpu", seed=0, **kw), stats


def test_out_allocated_and_returned():
    op, stats = make(standin_launcher())
    x = torch.randn(4, 32)
    y = op.fn(x)
    assert y.shape == (4, 16) and torch.allclose(y, silu_original(x), atol=1e-5)
    out = torch.empty(4, 16)
    assert op.fn(x, out=out) is out
    assert (stats.calls, stats.kernel_calls, stats.fallbacks) == (2, 2, 0)


def test_uncovered_calls_fall_through_to_original():
    calls = []

    def original(input, out=None):
        calls.append(input.dtype)
        return silu_original(input, out)

    op, stats = make(standin_launcher(), original, dtypes=["float32"])
    op.fn(torch.randn(2, 8, dtype=torch.float16))  # dtype not patched
    op.fn(torch.randn(2, 2, 8))  # 3-D: not the spec's [tokens, 2*d]
    op.fn(torch.randn(2, 8), enable_pdl=True)  # ignored launch hint: still ours
    assert calls == [torch.float16, torch.float32] and stats.fallbacks == 2 and stats.kernel_calls == 1


def test_abi_unsupported_falls_back():
    op, stats = make(lambda t, s: ASTRA_UNSUPPORTED)
    x = torch.randn(2, 8)
    assert torch.allclose(op.fn(x), silu_original(x))
    assert stats.fallbacks == 1 and op.active


def test_launch_error_disables():
    op, stats = make(lambda t, s: 700)  # cudaErrorIllegalAddress
    x = torch.randn(2, 8)
    assert torch.allclose(op.fn(x), silu_original(x))
    assert not op.active and "cudaError 700" in stats.disabled_reason


def test_shadow_mismatch_disables_and_returns_original():
    op, stats = make(standin_launcher(wrong=True), verify_rate=1.0)
    x = torch.randn(4, 32)
    y = op.fn(x)
    assert torch.allclose(y, silu_original(x), atol=1e-5), "the mismatching call returns the original's result"
    assert stats.shadow_checks == 1 and stats.shadow_mismatches == 1 and not op.active
    assert "shadow mismatch" in stats.disabled_reason and stats.record().disabled
    op.fn(x)  # later calls go straight to the original
    assert stats.fallbacks == 1 and stats.kernel_calls == 1


def test_shadow_match_keeps_patch_and_times_both():
    op, stats = make(standin_launcher(), verify_rate=1.0)
    for _ in range(3):
        op.fn(torch.randn(4, 32))
    rec = stats.record()
    assert op.active and rec.shadow_checks == 3 and rec.shadow_mismatches == 0
    assert rec.patched.samples == 3 and rec.original.samples == 3


def test_inplace_op_shadow_restores_both_arguments():
    def original(input, residual, weight, eps=1e-6, enable_pdl=None):
        reference.fused_add_rmsnorm(input, residual, weight, eps)

    def wrong(tensors, scalars):
        original(*tensors, *scalars)
        tensors[1].add_(1.0)  # residual off
        return 0

    op, stats = make(wrong, original, op="fused_add_rmsnorm", verify_rate=1.0)
    x, r, w = torch.randn(3, 64), torch.randn(3, 64), torch.rand(64)
    x2, r2 = x.clone(), r.clone()
    assert op.fn(x, r, w, 1e-6) is None
    original(x2, r2, w, 1e-6)
    assert torch.allclose(x, x2) and torch.allclose(r, r2) and stats.shadow_mismatches == 1


def test_returning_original_gets_outputs_copied():
    """flashinfer.cascade.merge_state(v_a, s_a, v_b, s_b) returns (v, s) instead of writing outputs."""
    def merge_state(v_a, s_a, v_b, s_b):
        v, s = torch.empty_like(v_a), torch.empty_like(s_a)
        reference.merge_state_base2(v_a, s_a, v_b, s_b, v, s)
        return v, s

    op, stats = make(lambda t, s: ASTRA_UNSUPPORTED, merge_state, op="merge_state", verify_rate=1.0)
    args = (torch.randn(2, 3, 8), torch.randn(2, 3), torch.randn(2, 3, 8), torch.randn(2, 3))
    vals = [*args, torch.empty(2, 3, 8), torch.empty(2, 3)]
    op.call_original_into(vals)
    v, s = merge_state(*args)
    assert torch.allclose(vals[4], v) and torch.allclose(vals[5], s)
    got = op.fn(*args)
    assert torch.allclose(got[0], v) and stats.fallbacks == 1


def test_nan_in_original_is_not_a_mismatch():
    """sgl-kernel's merge_state_v2 yields NaN when both LSEs are -inf; our reference defines 0 / -inf."""
    def sglang_like(v_a, s_a, v_b, s_b, v_merged=None, s_merged=None):
        reference.merge_attn_states_lse(v_a, s_a, v_b, s_b, v_merged, s_merged)
        both = torch.isinf(s_a) & torch.isinf(s_b)
        v_merged[both] = float("nan")
        return v_merged, s_merged

    def ours(t, s):
        reference.merge_attn_states_lse(*t)
        return 0

    op, stats = make(ours, sglang_like, op="merge_attn_states_lse", verify_rate=1.0)
    s_a = torch.randn(4, 2)
    s_a[0] = float("-inf")
    s_b = s_a.clone()
    op.fn(torch.randn(4, 2, 8), s_a, torch.randn(4, 2, 8), s_b)
    assert stats.shadow_checks == 1 and stats.shadow_mismatches == 0 and op.active


def test_torch_compile_and_opcheck():
    op, stats = make(standin_launcher())
    x = torch.randn(4, 32)
    compiled = torch.compile(lambda t: op.fn(t) * 2, backend="aot_eager", fullgraph=True)
    assert torch.allclose(compiled(x), silu_original(x) * 2, atol=1e-5)
    assert stats.kernel_calls >= 1
    torch.library.opcheck(torch.ops.astra.silu_and_mul.default, (x, torch.empty(4, 16)))
    assert "Tensor(a!) out" in str(torch.ops.astra.silu_and_mul.default._schema)


def test_with_verification_each_new_shape_is_checked_first_and_graphs_get_only_checked_shapes(monkeypatch):
    from astra_sglang.patching import patched_op as ops_mod

    op, stats = make(standin_launcher(), verify_rate=1e-9)  # sampling alone would (almost) never check
    op.fn(torch.randn(4, 32))
    op.fn(torch.randn(4, 32))
    assert stats.shadow_checks == 1 and stats.kernel_calls >= 1  # first call of the shape only
    monkeypatch.setattr(ops_mod, "_capturing", lambda: True)
    before = stats.fallbacks
    op.fn(torch.randn(4, 32))  # checked shape: captured with our kernel
    assert stats.fallbacks == before
    op.fn(torch.randn(8, 32))  # never checked: the original goes into the graph
    assert stats.fallbacks == before + 1 and stats.shadow_checks == 1 and op.active


def test_shadow_tolerance_scales_with_tiny_live_activations():
    # Dummy-weight servers feed ~1e-3 activations: a 6% error must not hide under the unit-scale atol.
    def coarse(tensors, scalars):
        x, out = tensors
        out.copy_(silu_original(x) * 1.06)
        return 0

    op, stats = make(coarse, verify_rate=1.0)
    op.fn(torch.randn(4, 32) * 1e-3)
    assert stats.shadow_mismatches == 1 and not op.active
    honest, stats = make(standin_launcher(), verify_rate=1.0)
    honest.fn(torch.randn(4, 32) * 1e-3)
    assert stats.shadow_mismatches == 0 and honest.active


def test_shadow_compare_in_chunks_counts_every_bad_element(monkeypatch):
    """The chunked compare (bounded memory for large activations) finds bad elements in every chunk and
    scales atol by the largest magnitude over all chunks."""
    from astra_sglang.patching import shadow

    monkeypatch.setattr(shadow, "CHUNK", 7)
    op, _ = make(standin_launcher())
    theirs = torch.randn(5, 9)
    ours = theirs.clone()
    ours[0, 1] += 1.0
    ours[4, 8] -= 1.0  # the last, partial chunk
    assert op._mismatch(theirs.clone(), theirs, "out") == ""
    message = op._mismatch(ours, theirs, "out")
    assert message.startswith("out: 2 of 45 elements off")


def test_defer_leaves_large_calls_to_the_original_and_counts_them():
    from astra_sglang.patchset.manifest import Defer

    seen = []

    def original(input, out=None):
        seen.append(tuple(input.shape))
        return silu_original(input, out)

    # fp32 4 x 32 in + 4 x 16 out = 768 bytes: below; 8 x 32 + 8 x 16 = 1536 bytes: at the threshold
    op, stats = make(standin_launcher(), original, defer=Defer(min_bytes=1536, evidence="test"))
    small, large = torch.randn(4, 32), torch.randn(8, 32)
    torch.testing.assert_close(op.fn(small), silu_original(small))
    torch.testing.assert_close(op.fn(large), silu_original(large))
    op.fn(large)
    assert seen == [(8, 32), (8, 32)]
    assert (stats.calls, stats.kernel_calls, stats.fallbacks, stats.deferred) == (3, 1, 0, 2)
    assert op.active  # deferring is not a failure


def test_defer_applies_only_to_its_dtypes():
    from astra_sglang.patchset.manifest import Defer

    op, stats = make(standin_launcher(), dtypes=["float32", "float16"],
                     defer=Defer(min_bytes=1, dtypes=["float16"], evidence="test"))
    op.fn(torch.randn(4, 32))
    op.fn(torch.randn(4, 32, dtype=torch.float16))
    assert (stats.kernel_calls, stats.deferred) == (1, 1)


def test_defer_keeps_the_kernel_at_widths_it_was_not_measured_at():
    from astra_sglang.patchset.manifest import Defer

    op, stats = make(standin_launcher(), defer=Defer(min_bytes=1, multiple_of=16, evidence="test"))
    op.fn(torch.randn(4, 32))  # 2d = 32: a multiple of 16, deferred
    op.fn(torch.randn(4, 40))  # d = 20 (d % 8 == 4): our kernel serves it
    assert (stats.kernel_calls, stats.deferred) == (1, 1)


def test_defer_below_a_row_count_leaves_few_token_calls_to_the_original():
    from astra_sglang.patchset.manifest import Defer

    op, stats = make(standin_launcher(), defer=Defer(below_rows=8, evidence="test"))
    for rows in (1, 7, 8, 300, 3):
        op.fn(torch.randn(rows, 32))
    assert (stats.calls, stats.kernel_calls, stats.deferred) == (5, 2, 3)  # 1, 7, 3 rows deferred
    both = make(standin_launcher(), defer=Defer(below_rows=2, min_bytes=1536, evidence="test"))[0]
    both.fn(torch.randn(1, 32))
    both.fn(torch.randn(4, 32))
    both.fn(torch.randn(8, 32))  # 1536 bytes: the size bound
    assert (both.stats.kernel_calls, both.stats.deferred) == (1, 2)
    with pytest.raises(ValueError, match="min_bytes or below_rows"):
        Defer(evidence="no bound")


def test_calls_larger_than_the_gate_run_the_original():
    seen = []

    def original(input, out=None):
        seen.append(tuple(input.shape))
        return silu_original(input, out)

    # fp32 4 x 32 in + 4 x 16 out = 768 bytes: checked by the gate; 8 x 32 + 8 x 16 = 1536: never checked
    op, stats = make(standin_launcher(), original, max_bytes=768)
    small, large = torch.randn(4, 32), torch.randn(8, 32)
    torch.testing.assert_close(op.fn(small), silu_original(small))
    torch.testing.assert_close(op.fn(large), silu_original(large))
    assert seen == [(8, 32)] and (stats.kernel_calls, stats.fallbacks) == (1, 1) and op.active
