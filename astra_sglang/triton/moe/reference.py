"""Fused MoE's routing and its fp64 reference (spec extract/fused_moe.toml).

Routing: the top-k experts of each token by router logit, ties to the lower expert index (a stable sort), and
their softmax weights renormalized over the k. The op under test routes the same way (moe_op.route), so
the reference and every candidate choose the same experts for every token: with random fp32 logits a
top-k that breaks near-ties differently (fp32 softmax vs fp64) would flip an expert for some token of a
4096-token call every few evaluations, and that token's output row with it.
"""
from __future__ import annotations

from typing import Callable

import torch


def route(logits: torch.Tensor, topk: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(expert ids [tokens, topk] int64, weights [tokens, topk] in logits' dtype)."""
    ids = torch.sort(logits, dim=-1, descending=True, stable=True).indices[:, :topk]
    weights = torch.softmax(logits, dim=-1).gather(1, ids)
    return ids, weights / weights.sum(dim=-1, keepdim=True)


def fused_moe(hidden: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, router_logits: torch.Tensor,
              topk_weights: torch.Tensor, quant_in: Callable | None = None, quant_mid: Callable | None = None) -> None:
    """hidden <- sum over its top-k experts e of w_e * (silu(hidden @ gate_e.T) * (hidden @ up_e.T)) @ w2[e].T,
    where w1[e] = [gate_e; up_e] ([2N, H]) and w2[e] is [H, N]; topk_weights <- the routing weights. In place,
    in the tensors' own precision (fp64 when the harness calls it). `quant_in` / `quant_mid`, where given, map the
    GEMMs' inputs (the hidden rows, the activation) as a quantized kernel rounds them (fp8.fake_quant)."""
    tokens, topk = topk_weights.shape
    inter = w2.shape[2]
    ids, weights = route(router_logits, topk)
    topk_weights.copy_(weights)
    flat = ids.reshape(-1)
    rows_of = torch.arange(tokens, device=hidden.device).repeat_interleave(topk)
    scale = weights.reshape(-1)
    out = torch.zeros_like(hidden)
    for expert in torch.unique(flat).tolist():
        slots = torch.nonzero(flat == expert).squeeze(1)
        rows = rows_of[slots]
        x = hidden[rows] if quant_in is None else quant_in(hidden[rows])
        gate_up = x @ w1[expert].T
        act = torch.nn.functional.silu(gate_up[:, :inter]) * gate_up[:, inter:]
        act = act if quant_mid is None else quant_mid(act)
        out.index_add_(0, rows, (act @ w2[expert].T) * scale[slots, None].to(out.dtype))
    hidden.copy_(out)
