"""fp64 references of SGLang's Triton attention (specs extract/decode_attention.toml, extend_attention.toml):
softmax(q k^T / sqrt(head dim)) v over the slots the paged layout gives each request (attn_layout), grouped
query heads sharing their kv head. Computed a chunk at a time to bound the fp64 scores' memory."""
from __future__ import annotations

import torch

from astra_sglang.triton.attention.layout import decode_slots, extend_slots

CHUNK = 256
"""Queries per chunk (extend); decode goes a request at a time."""


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """q [n, H, D], k/v [L, Hkv, D] (one request) -> [n, H, D]; mask [n, L] True where a key is visible."""
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    scores = torch.einsum("nhd,lhd->hnl", q, k) * q.shape[-1] ** -0.5
    if mask is not None:
        scores = scores.masked_fill(~mask[None], float("-inf"))
    return torch.einsum("hnl,lhd->nhd", torch.softmax(scores, dim=-1), v)


def decode_attention(q, k_buffer, v_buffer, o) -> None:
    """o[b] <- attention of q[b] over request b's kv_len slots of the pool."""
    batch = q.shape[0]
    kv_len = k_buffer.shape[0] // batch
    indptr, indices = decode_slots(batch, kv_len)
    indices = indices.to(q.device).long()
    for b in range(batch):
        slots = indices[int(indptr[b]):int(indptr[b + 1])]
        o[b:b + 1].copy_(_attend(q[b:b + 1], k_buffer[slots], v_buffer[slots]))


def extend_attention(q, k_extend, v_extend, o, k_buffer, v_buffer) -> None:
    """o <- causal attention of the new tokens over the cached prefix's slots and the new tokens."""
    extend = q.shape[0]
    prefix = k_buffer.shape[0] - extend
    _, _, indices = extend_slots(extend, prefix)
    indices = indices.to(q.device).long()
    k = torch.cat([k_buffer[indices], k_extend])
    v = torch.cat([v_buffer[indices], v_extend])
    keys = torch.arange(prefix + extend, device=q.device)
    for start in range(0, extend, CHUNK):
        rows = torch.arange(start, min(extend, start + CHUNK), device=q.device)
        mask = keys[None, :] <= (prefix + rows)[:, None]
        o[start:start + len(rows)].copy_(_attend(q[rows], k, v, mask))
