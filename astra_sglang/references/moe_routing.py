"""MoE routing: the fp64 reference of SGLang's `topk_softmax` (extract/topk_softmax.toml) and the logits its
checks draw.

Order of the outputs: SGLang's kernels pick the experts one at a time, the largest weight first and, among equal
weights, the lowest expert id (a strict `>` over ascending ids, ties to the lower id across threads). The
reference sorts the same way (a stable sort of the negated weights), so ids are comparable element by element.
"""
from __future__ import annotations

import math

import torch

SPAN = 8.0
"""Drawn logits spread over about [-4, 4), a trained router's range at any expert count."""


def grid_step(experts: int) -> float:
    """The power of two spacing `experts` logits about SPAN wide: i * step with |i| <= 256 (up to 512 experts) is
    exact in bf16 (8 significant bits), fp16 and fp32, and neighbours' softmax weights differ by a factor
    e^step >= e^(1/64), far beyond fp32 rounding."""
    return 2.0 ** math.floor(math.log2(SPAN / max(experts, 1)))


def topk_softmax(topk_weights: torch.Tensor, topk_ids: torch.Tensor, gating_output: torch.Tensor,
                 renormalize: bool) -> None:
    """topk_weights, topk_ids <- the top-k of softmax(gating_output) over the experts (k = topk_weights' width),
    in descending weight, lowest id first on ties; weights divided by their sum when `renormalize`."""
    k = topk_weights.shape[-1]
    probs = torch.softmax(gating_output.double(), dim=-1)
    order = torch.sort(-probs, dim=-1, stable=True).indices[..., :k]
    weights = probs.gather(-1, order)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    topk_weights.copy_(weights)
    topk_ids.copy_(order)


def distinct_logits(shape: tuple[int, ...], dtype: torch.dtype, gen: torch.Generator, dims: dict[str, int]
                    ) -> torch.Tensor:
    """Router logits with no two equal in a row: a per-row shuffle of the grid (i - experts // 2) * grid_step(experts).

    Expert ids are compared exactly; with ties, which of two equal weights a kernel lists first depends on its
    summation order (the softmax's sum rounds differently), which is not a correctness question. The spec's edge
    cases add equal and large logits."""
    experts = shape[-1]
    rows = math.prod(shape[:-1])
    order = torch.rand((rows, experts), generator=gen, device=gen.device).argsort(dim=-1)
    values = (order.float() - experts // 2) * grid_step(experts)
    return values.reshape(shape)
