"""Adapters giving third-party ops the spec's calling convention (spec argument order, in-place outputs).

Used as Python baselines in the harness (`--baseline py:MODULE:FUNCTION`): SGLang's own entry points are
timed exactly as SGLang calls them. Only ops whose signature differs from the spec need an adapter here.
"""
from __future__ import annotations


def flashinfer_merge_state(v_a, s_a, v_b, s_b, v_merged, s_merged) -> None:
    """flashinfer.cascade.merge_state returns new tensors; the spec writes into v_merged / s_merged."""
    from flashinfer.cascade import merge_state

    v, s = merge_state(v_a, s_a, v_b, s_b)
    v_merged.copy_(v)
    s_merged.copy_(s)


def sglang_silu_and_mul(input, out) -> None:
    """SGLang's own dispatcher: its JIT kernel for aligned sizes, sgl_kernel's otherwise."""
    from sglang.srt.layers.activation import silu_and_mul

    silu_and_mul(input, out)
