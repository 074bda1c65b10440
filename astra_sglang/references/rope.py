"""Rotary position embedding: the fp64 reference of SGLang's `apply_rope_with_cos_sin_cache_inplace` and the
generator of a real cos/sin cache (extract/rotary_embedding.toml)."""
from __future__ import annotations

import torch

ROPE_BASE = 10000.0
"""Llama's rope_theta; the cache's values matter only in being real cosines and sines of growing angles."""


def cos_sin_cache(shape: tuple[int, ...], dtype: torch.dtype, gen: torch.Generator, dims: dict) -> torch.Tensor:
    """SGLang's RotaryEmbedding._compute_cos_sin_cache: rows = positions, [cos | sin] of position x inv_freq
    (fp64 here, cast by the harness). `gen` is unused: the cache is a model constant, not random."""
    max_pos, rot = shape
    inv_freq = 1.0 / (ROPE_BASE ** (torch.arange(0, rot, 2, dtype=torch.float64) / rot))
    freqs = torch.outer(torch.arange(max_pos, dtype=torch.float64), inv_freq)
    return torch.cat((freqs.cos(), freqs.sin()), dim=-1).to(device=gen.device)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, is_neox: bool) -> torch.Tensor:
    if is_neox:
        x1, x2 = x.chunk(2, dim=-1)
    else:
        x1, x2 = x[..., ::2], x[..., 1::2]
    o1, o2 = x1 * cos - x2 * sin, x2 * cos + x1 * sin
    return torch.cat((o1, o2), dim=-1) if is_neox else torch.stack((o1, o2), dim=-1).flatten(-2)


def rotary_embedding(q: torch.Tensor, k: torch.Tensor, cos_sin_cache: torch.Tensor, positions: torch.Tensor,
                     is_neox: bool = True, rope_dim: int = 0) -> None:
    """In place: the first `rope_dim` (default: the cache's width) features of every head of q [tokens, heads,
    head_dim] and k [tokens, kv_heads, head_dim] rotated by the angles of their token's position."""
    rot = int(rope_dim) or cos_sin_cache.shape[-1]
    cs = cos_sin_cache.double()[positions.long()]  # [tokens, rot]
    cos, sin = cs[:, None, : rot // 2], cs[:, None, rot // 2: rot]
    for x in (q, k):
        x[..., :rot] = _rotate(x[..., :rot].double(), cos, sin, bool(is_neox)).to(x.dtype)


def cost(dims: dict[str, int], dtype: str) -> tuple[int, int]:
    """(bytes, FLOPs) of one call: q and k read and written, the positions read, and only the cache rows the
    positions name (at most one per token, at most every row), not the whole cache."""
    from astra_sglang.specs.dtypes import ELEMENT_BYTES

    tokens, head_dim = dims["tokens"], dims["head_dim"]
    qk = 2 * tokens * (dims["heads"] + dims["kv_heads"]) * head_dim * ELEMENT_BYTES[dtype]
    cache = min(tokens, dims["max_pos"]) * head_dim * 4
    return qk + tokens * 8 + cache, 0
