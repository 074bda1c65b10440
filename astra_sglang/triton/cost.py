"""Cost models (spec `cost = "module:function"`): the fewest bytes and FLOPs of a call, for the physics bound.

Fused MoE reads only the experts its tokens route to: a decode step of 8 tokens with 8 of 128 experts each
touches ~60 experts, not 128, and at 4096 tokens the call is compute-bound. The bound counts the arithmetic
exactly and the experts read from below (see `experts_read`), so that it never exceeds what an honest kernel
must do.
"""
from __future__ import annotations

import math

from astra_sglang.specs.dtypes import ELEMENT_BYTES

SIGMAS = 4.0
"""How far below its mean the count of experts read is taken (standard deviations)."""


def hit_probability(tokens: int, experts: int, topk: int) -> float:
    """p = 1 - (1 - k/E)^T: the chance that an expert is among those `tokens` tokens route to, each to `topk`
    distinct experts drawn uniformly (the spec's random logits, and SGLang's tuner's): each token misses it with
    probability 1 - k/E."""
    return 1.0 - (1.0 - min(1.0, topk / experts)) ** tokens


def experts_expected(tokens: int, experts: int, topk: int) -> float:
    """The mean count of distinct experts read, E*p."""
    return experts * hit_probability(tokens, experts, topk)


def experts_read(tokens: int, experts: int, topk: int) -> int:
    """A lower bound on the distinct experts read: the mean E*p less SIGMAS standard deviations of the count
    (at most sqrt(E p (1 - p)): the indicators of experts being hit are negatively associated), and never below
    the topk experts one token reads."""
    p = hit_probability(tokens, experts, topk)
    mean, sd = experts * p, math.sqrt(experts * p * (1.0 - p))
    return int(max(min(experts, topk), math.floor(mean - SIGMAS * sd)))


def expert_elements(inter: int, hidden: int) -> int:
    """Weight elements of one expert: w1 ([2N, H]: gate and up) and w2 ([H, N])."""
    return 3 * inter * hidden


def moe_flops(tokens: int, topk: int, inter: int, hidden: int) -> int:
    """The two GEMMs over every routed token slot: 2*T*k*2N*H (gate/up) and 2*T*k*N*H (down)."""
    return 6 * tokens * topk * inter * hidden


def fused_moe(dims: dict[str, int], dtype: str, weight_bytes: int | None = None) -> tuple[int, int]:
    """(bytes, FLOPs) of one call: the weights of the experts read, the hidden states read and written in place,
    the router logits read and the routing weights written; the two GEMMs' FLOPs. Intermediates are not counted
    (a fused kernel may keep them on chip). `weight_bytes`: a weight element's size where it is not `dtype`'s."""
    tokens, experts, inter, hidden, topk = (dims[d] for d in ("tokens", "experts", "inter", "hidden", "topk"))
    size = ELEMENT_BYTES[dtype]
    weights = experts_read(tokens, experts, topk) * expert_elements(inter, hidden) * (weight_bytes or size)
    activations = 2 * tokens * hidden * size
    routing = tokens * experts * 4 + tokens * topk * 4
    return weights + activations + routing, moe_flops(tokens, topk, inter, hidden)


def fused_moe_fp8(dims: dict[str, int], dtype: str) -> tuple[int, int]:
    """fused_moe's bytes and FLOPs with the weights stored in fp8 (one byte an element, the per-expert scales
    negligible): the activations stay in `dtype`."""
    return fused_moe(dims, dtype, weight_bytes=1)


def decode_attention(dims: dict[str, int], dtype: str) -> tuple[int, int]:
    """(bytes, FLOPs) of one decode call: every request's K and V rows read once (the pool holds nothing
    else), q read and the output written; QK^T and PV: 4 * batch * heads * kv_len * head_dim FLOPs. The
    split scratch (fp32 partial outputs, a second kernel) is not counted: a kernel without splits skips it."""
    batch, kv_len, heads, kv_heads, head_dim = (dims[d] for d in ("batch", "kv_len", "heads", "kv_heads", "head_dim"))
    size = ELEMENT_BYTES[dtype]
    kv = 2 * batch * kv_len * kv_heads * head_dim * size
    return kv + 2 * batch * heads * head_dim * size, 4 * batch * heads * kv_len * head_dim


def extend_attention(dims: dict[str, int], dtype: str) -> tuple[int, int]:
    """(bytes, FLOPs) of one extend call (one request): the prefix's K/V rows and the new tokens' K/V read,
    q read, the output written; causal QK^T and PV: query i sees prefix + i + 1 keys."""
    extend, prefix, heads, kv_heads, head_dim = (dims[d] for d in ("extend", "prefix", "heads", "kv_heads", "head_dim"))
    size = ELEMENT_BYTES[dtype]
    kv = 2 * (prefix + extend) * kv_heads * head_dim * size
    keys = extend * prefix + extend * (extend + 1) // 2
    return kv + 2 * extend * heads * head_dim * size, 4 * heads * head_dim * keys
