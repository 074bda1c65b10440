"""The second half of a split-K launch (ours): C[row, n] = sum over splits of the fp32 workspace, cast to C's
dtype. One program per BLOCK consecutive elements of the [rows, N] output; the splits summed in order, so the
result repeats bit for bit."""
from __future__ import annotations

import triton
import triton.language as tl

BLOCK = 1024


@triton.jit
def splitk_reduce(ws_ptr, c_ptr, total, N, stride_ws, stride_cm, stride_cn, SPLIT_K: tl.constexpr,
                  BLOCK: tl.constexpr):
    offs = tl.program_id(axis=0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < total
    acc = tl.load(ws_ptr + offs, mask=mask, other=0.0)
    for s in tl.static_range(1, SPLIT_K):
        acc += tl.load(ws_ptr + s * stride_ws + offs, mask=mask, other=0.0)
    row = offs // N
    col = offs % N
    tl.store(c_ptr + row * stride_cm + col * stride_cn, acc.to(c_ptr.dtype.element_ty), mask=mask)


def reduce_into(ws, c, rows: int, n: int, split: int) -> None:
    """C (any tensor whose last two dims address [rows, N] by its last two strides) <- ws.sum(0) in fp32."""
    total = rows * n
    splitk_reduce[(triton.cdiv(total, BLOCK),)](ws, c, total, n, rows * n, c.stride(-2), c.stride(-1),
                                                SPLIT_K=split, BLOCK=BLOCK)
