"""Adapters giving third-party ops the spec's calling convention (spec argument order, in-place outputs).

Used as Python baselines in the harness (`--baseline py:MODULE:FUNCTION`): SGLang's own entry points are
timed exactly as SGLang calls them. Only ops whose signature differs from the spec need an adapter here.
"""
from __future__ import annotations

import functools
import importlib

# Ops whose original does not take the spec's arguments: the harness calls an adapter instead.
ADAPTERS = {"merge_state": "py:astra_sglang.baselines.adapters:flashinfer_merge_state",
            "fused_moe": "py:astra_sglang.triton.moe.op:sglang_pick",
            "fused_moe_fp8": "py:astra_sglang.triton.moe.op_fp8:sglang_pick",
            "rotary_embedding": "py:astra_sglang.baselines.adapters:sglang_rotary_embedding"}
KERNEL_BASELINES = {
    "silu_and_mul": "py:astra_sglang.baselines.adapters:sglang_silu_and_mul",
    "gelu_and_mul": "py:astra_sglang.baselines.adapters:sglang_gelu_and_mul",
    "gelu_tanh_and_mul": "py:astra_sglang.baselines.adapters:sglang_gelu_tanh_and_mul",
    "fused_add_rmsnorm": "py:sgl_kernel:fused_add_rmsnorm",
    "rmsnorm": "py:sgl_kernel:rmsnorm",
    "gemma_fused_add_rmsnorm": "py:sgl_kernel:gemma_fused_add_rmsnorm",
    "gemma_rmsnorm": "py:sgl_kernel:gemma_rmsnorm",
    "merge_attn_states_lse": "py:sgl_kernel:merge_state_v2",
    "topk_softmax": "py:sglang.kernels.ops.moe:topk_softmax",
    "per_token_group_quant_fp8": "py:astra_sglang.baselines.adapters:sglang_per_token_group_quant_fp8",
    **ADAPTERS,
}
"""What SGLang 0.5.17 runs on CUDA per op, importable without SGLang's attention backends (the benchmark
scripts' baselines; merge_state_v2 is the object the FA3 backend binds; sglang.kernels.ops.moe.topk_softmax is the
object sglang.srt.layers.moe.topk binds, sgl_kernel's behind SGLang's kernel registry, in the spec's order; the FP8
quant's is its JIT kernel, which sglang_per_token_group_quant_fp8 runs on CUDA)."""


def sglang_baseline(spec) -> str | None:
    """What SGLang itself calls for this op, as a harness baseline: the first call site's module global
    (e.g. py:sglang.srt.layers.layernorm:rmsnorm), or an adapter where the signatures differ."""
    if spec.name in ADAPTERS:
        return ADAPTERS[spec.name]
    if getattr(spec, "onboard", None) is not None:  # the adapter `onboard` wrote: the op, called as it takes its args
        return f"py:{spec.onboard.call}"
    first = spec.sglang_targets[0] if spec.sglang_targets else None
    return f"py:{first.module}:{first.attr}" if first else None


def flashinfer_merge_state(v_a, s_a, v_b, s_b, v_merged, s_merged) -> None:
    """flashinfer.cascade.merge_state's own kernel, writing into the spec's outputs.

    The public function allocates v_merged / s_merged and returns them (allocation is free inside a CUDA
    graph); copying its results into ours would add two copy kernels to the baseline's time, so the
    kernel is called with our outputs instead.
    """
    from flashinfer.cascade import get_cascade_module

    get_cascade_module().merge_state(v_a, s_a, v_b, s_b, v_merged, s_merged)


@functools.cache
def _sglang_activation(name: str):
    """SGLang's own dispatcher for one gated activation (sglang.srt.layers.activation.NAME): its JIT kernel for
    aligned sizes, sgl_kernel's otherwise; imported at the first call (SGLang is optional here), then cached."""
    return getattr(importlib.import_module("sglang.srt.layers.activation"), name)


def sglang_silu_and_mul(input, out) -> None:
    _sglang_activation("silu_and_mul")(input, out)


def sglang_gelu_and_mul(input, out) -> None:
    """What GeluAndMul(approximate="none").forward_cuda runs."""
    _sglang_activation("gelu_and_mul")(input, out)


def sglang_gelu_tanh_and_mul(input, out) -> None:
    """What GeluAndMul(approximate="tanh").forward_cuda runs."""
    _sglang_activation("gelu_tanh_and_mul")(input, out)


@functools.cache
def _sglang_rope():
    """SGLang's apply_rope_with_cos_sin_cache_inplace from the module that defines it (its JIT kernel is compiled
    at the first call per is_neox / width / dtype); the module RotaryEmbedding binds it into imports it only on CUDA."""
    return importlib.import_module("sglang.kernels.ops.attention.rope").apply_rope_with_cos_sin_cache_inplace


def sglang_rotary_embedding(q, k, cos_sin_cache, positions, is_neox=True, rope_dim=0) -> None:
    """What RotaryEmbedding.forward_cuda runs, called as it calls it: keywords, positions first, fused_args=None
    (is_neox is keyword-only there, so the harness's positional call cannot reach it directly)."""
    extra = {"rope_dim": int(rope_dim)} if rope_dim else {}  # forward_cuda never passes it: the cache's width
    _sglang_rope()(positions=positions, q=q, k=k, cos_sin_cache=cos_sin_cache, is_neox=bool(is_neox), fused_args=None,
                   **extra)


def sglang_per_token_group_quant_fp8(x, group_size, eps, column_major_scales, scale_tma_aligned, x_q, x_s) -> None:
    """What SGLang's sglang_per_token_group_quant_fp8 runs on CUDA, writing into the spec's outputs: its JIT kernel
    per_token_group_quant (the scales' layout read from x_s's strides, as SGLang's does), or, where one group is
    the whole row, the per-token quant it routes that case to. The public function allocates x_q / x_s and
    returns them; the kernels are called with ours instead, as the function itself calls them."""
    if eps != 1e-10:  # the JIT kernel bakes its floor in; SGLang's function asserts the same
        raise ValueError(f"SGLang's per_token_group_quant takes eps = 1e-10 only, not {eps}")
    if group_size == x.shape[-1] and not column_major_scales:
        importlib.import_module("sglang.kernels.ops.quantization").sgl_per_token_quant_fp8(x, x_q, x_s)
    else:
        _sglang_group_quant()(x, x_q, x_s, int(group_size))


@functools.cache
def _sglang_group_quant():
    """SGLang's JIT per_token_group_quant, from the module that defines it: the package
    sglang.kernels.ops.quantization has a function and a submodule of that name, and once the submodule is
    imported (SGLang's kernel registry imports it at the function's first call) the package's attribute is the
    module, so a lookup through the package fails from the second call on. SGLang's fp8_kernel binds the
    function when it is imported, before that happens; the registry then dispatches to this very function."""
    return importlib.import_module("sglang.kernels.ops.quantization.per_token_group_quant").per_token_group_quant
