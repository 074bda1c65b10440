"""Torch references for every spec'd op, computed in fp64 and written back with the op's semantics.

Each takes the op's arguments in spec order (tensors and scalars) and mutates its out / in-place
arguments exactly as the original does, so the harness treats a reference like any other kernel.
"""
from __future__ import annotations

import math

import torch


def silu_and_mul(input: torch.Tensor, out: torch.Tensor) -> None:
    d = out.shape[-1]
    x = input.double()
    out.copy_(torch.nn.functional.silu(x[..., :d]) * x[..., d:])


def _gated(input: torch.Tensor, out: torch.Tensor, approximate: str) -> None:
    d = out.shape[-1]
    x = input.double()
    out.copy_(torch.nn.functional.gelu(x[..., :d], approximate=approximate) * x[..., d:])


def gelu_and_mul(input: torch.Tensor, out: torch.Tensor) -> None:
    """SGLang GeluAndMul(approximate="none"): gelu(x[:, :d]) * x[:, d:], gelu with erf."""
    _gated(input, out, "none")


def gelu_tanh_and_mul(input: torch.Tensor, out: torch.Tensor) -> None:
    """SGLang GeluAndMul(approximate="tanh"): PyTorch's tanh approximation of gelu."""
    _gated(input, out, "tanh")


def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float, bias: float = 0.0) -> torch.Tensor:
    # bias 1: Gemma's norms apply the weight as 1 + weight (SGLang GemmaRMSNorm, flashinfer's weight_bias).
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * (weight.double() + bias)


def rmsnorm(input: torch.Tensor, weight: torch.Tensor, eps: float, out: torch.Tensor) -> None:
    out.copy_(_rms(input.double(), weight, eps))


def gemma_rmsnorm(input: torch.Tensor, weight: torch.Tensor, eps: float, out: torch.Tensor) -> None:
    out.copy_(_rms(input.double(), weight, eps, bias=1.0))


def fused_add_rmsnorm(input: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
                      bias: float = 0.0) -> None:
    # SGLang's semantics: residual <- input + residual (stored in T), input <- rmsnorm(that sum) * weight.
    total = input.double() + residual.double()
    residual.copy_(total)
    input.copy_(_rms(total, weight, eps, bias))


def gemma_fused_add_rmsnorm(input: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
    fused_add_rmsnorm(input, residual, weight, eps, bias=1.0)


def _merge(v_a, s_a, v_b, s_b, v_merged, s_merged, log_base: float) -> None:
    # ±inf LSEs mark empty partial states; when both are empty the result is defined as 0 with LSE -inf
    # (sgl-kernel computes 0/0 = NaN there: the harness reports that as a baseline defect).
    scale = math.log(log_base)  # LSE in base b -> natural log
    a = torch.where(torch.isinf(s_a), -math.inf, s_a.double()) * scale
    b = torch.where(torch.isinf(s_b), -math.inf, s_b.double()) * scale
    m = torch.maximum(a, b)
    empty = torch.isneginf(m)
    m_safe = torch.where(empty, 0.0, m)
    wa, wb = torch.exp(a - m_safe), torch.exp(b - m_safe)
    total = wa + wb
    denom = torch.where(empty, 1.0, total)
    out = (v_a.double() * (wa / denom)[..., None] + v_b.double() * (wb / denom)[..., None])
    v_merged.copy_(torch.where(empty[..., None], 0.0, out))
    s_merged.copy_(torch.where(empty, -math.inf, (m_safe + torch.log(total)) / scale))


def merge_attn_states_lse(v_a, s_a, v_b, s_b, v_merged, s_merged) -> None:
    """sgl_kernel.merge_state_v2: v [tokens, heads, head_dim], LSE fp32 [tokens, heads], natural log."""
    _merge(v_a, s_a, v_b, s_b, v_merged, s_merged, math.e)


def merge_state_base2(v_a, s_a, v_b, s_b, v_merged, s_merged) -> None:
    """flashinfer.cascade.merge_state: the same merge with base-2 LSEs."""
    _merge(v_a, s_a, v_b, s_b, v_merged, s_merged, 2.0)
