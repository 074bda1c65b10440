"""The paged KV layout SGLang's triton backend hands its attention kernels (page size 1), built from a shape.

The server keeps every token's K and V in one pool per layer (`k_buffer`, `v_buffer`: [slots, kv heads,
head dim]) and hands the kernels the slots of each request: `kv_indptr` (request i's slots are
kv_indices[kv_indptr[i]:kv_indptr[i+1]]) and `kv_indices` (int32), gathered from `req_to_token` rows. After a
while of serving, a request's slots are scattered over the pool; here they are a fixed-seed permutation of it,
so that the evaluator op and the fp64 reference read the same slots without either being told them.
"""
from __future__ import annotations

import functools

import torch

SEED = 20240917


@functools.lru_cache(maxsize=64)
def _permutation(slots: int) -> torch.Tensor:
    return torch.randperm(slots, generator=torch.Generator().manual_seed(SEED)).to(torch.int32)


def decode_slots(batch: int, kv_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(kv_indptr [batch + 1], kv_indices [batch * kv_len]) on the CPU: request i holds kv_len slots of the
    pool of batch * kv_len."""
    indptr = torch.arange(0, batch * kv_len + 1, kv_len, dtype=torch.int32)
    return indptr, _permutation(batch * kv_len)


def extend_slots(extend: int, prefix: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(qo_indptr [2], kv_indptr [2], kv_indices [prefix]) of one request extending `prefix` cached tokens by
    `extend` new ones; the pool holds prefix + extend slots (the new tokens' K/V are stored before the call,
    as the backend does), the prefix's slots scattered among them."""
    qo = torch.tensor([0, extend], dtype=torch.int32)
    kv = torch.tensor([0, prefix], dtype=torch.int32)
    return qo, kv, _permutation(prefix + extend)[:prefix].contiguous()
