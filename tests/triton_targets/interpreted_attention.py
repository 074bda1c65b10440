"""Run by test_attention_interpreted.py in a process of its own with TRITON_INTERPRET=1 (set before SGLang's
kernels are decorated): SGLang's real decode and extend attention kernels, launched by SGLang's own launchers
through the launch patch (LaunchPatch, as `launch` installs it), on CPU tensors, against the fp64 references.
fp16: Triton's interpreter computes bf16 wrongly on CPU (numpy has no bf16), fp16 and fp32 correctly.
Prints one JSON object: {case: worst |out - ref| / (atol + rtol |ref|)}."""
from __future__ import annotations

import json
import sys

import torch

from astra_sglang.patching.stats import OpStats
from astra_sglang.patching.triton_launch import LaunchPatch
from astra_sglang.patchset.manifest import LaunchTable
from astra_sglang.triton.attention import launch as attn_launch
from astra_sglang.triton.attention import reference as attn_reference
from astra_sglang.triton.attention.layout import decode_slots, extend_slots
from astra_sglang.triton.attention.targets import sglang_module, swapped

HEADS, KV_HEADS, HEAD_DIM, SPLITS = 32, 4, 64, 8
ATOL = RTOL = 4e-3  # extract/*_attention.toml, float16
DTYPE = torch.float16


def worst(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float(((out.double() - ref).abs() / (ATOL + RTOL * ref.abs())).max())


def table(kernel: str, configs: dict[int, str]) -> LaunchTable:
    return LaunchTable(kernel=kernel, heads=HEADS, kv_heads=KV_HEADS, head_dim=HEAD_DIM, dtype="float16",
                       device="cpu", triton="interpreter", by="batch" if kernel == "decode_attention" else "extend",
                       configs=configs, max_key=max(configs))


def decode(batch: int, kv_len: int, patch: LaunchPatch | None) -> float:
    module = sglang_module("decode_attention")
    from sglang.kernels.ops.attention.metadata import get_num_kv_splits_triton

    gen = torch.Generator().manual_seed(batch * 1000 + kv_len)
    q = torch.randn(batch, HEADS, HEAD_DIM, generator=gen).to(DTYPE)
    k = torch.randn(batch * kv_len, KV_HEADS, HEAD_DIM, generator=gen).to(DTYPE)
    v = torch.randn(batch * kv_len, KV_HEADS, HEAD_DIM, generator=gen).to(DTYPE)
    indptr, indices = decode_slots(batch, kv_len)
    splits = torch.empty(batch, dtype=torch.int32)
    get_num_kv_splits_triton[(1,)](splits, torch.full((batch,), kv_len, dtype=torch.int32), batch, 1, HEADS,
                                   KV_HEADS, SPLITS, 132, MAX_NUM_SEQ=256)
    logits = torch.empty(batch, HEADS, SPLITS, HEAD_DIM, dtype=torch.float32)
    lse = torch.empty(batch, HEADS, SPLITS, dtype=torch.float32)
    out, ref = torch.zeros(batch, HEADS, HEAD_DIM, dtype=DTYPE), torch.empty(batch, HEADS, HEAD_DIM, dtype=torch.float64)
    with swapped(module, **({"_fwd_grouped_kernel_stage1": patch.fn} if patch else {})):
        module.decode_attention_fwd(q, k, v, out, indptr, indices, logits, lse, splits, SPLITS, HEAD_DIM ** -0.5,
                                    1.0, 1.0)
    attn_reference.decode_attention(q, k, v, ref)
    return worst(out, ref)


def extend(rows: int, prefix: int, patch: LaunchPatch | None) -> float:
    module = sglang_module("extend_attention")
    gen = torch.Generator().manual_seed(rows * 1000 + prefix)
    q = torch.randn(rows, HEADS, HEAD_DIM, generator=gen).to(DTYPE)
    k, v = (torch.randn(rows, KV_HEADS, HEAD_DIM, generator=gen).to(DTYPE) for _ in range(2))
    kb, vb = (torch.randn(rows + prefix, KV_HEADS, HEAD_DIM, generator=gen).to(DTYPE) for _ in range(2))
    qo_indptr, kv_indptr, kv_indices = extend_slots(rows, prefix)
    out, ref = torch.zeros(rows, HEADS, HEAD_DIM, dtype=DTYPE), torch.empty(rows, HEADS, HEAD_DIM, dtype=torch.float64)
    # SGLang picks extend block sizes by CUDA capability: an H100's, as attn_targets does off a GPU.
    with swapped(module, _is_cuda=True, CUDA_CAPABILITY=(9, 0), _is_hip=False,
                 **({"_fwd_kernel": patch.fn} if patch else {})):
        module.extend_attention_fwd(q, k, v, out, kb, vb, qo_indptr, kv_indptr, kv_indices, None, True, None, rows,
                                    1.0, 1.0)
    attn_reference.extend_attention(q, k, v, ref, kb, vb)
    return worst(out, ref)


def patch_of(kernel: str, configs: dict[int, str], stats: OpStats) -> LaunchPatch:
    original = getattr(sglang_module(kernel), "_fwd_grouped_kernel_stage1" if kernel == "decode_attention"
                       else "_fwd_kernel")
    return LaunchPatch(original, kernel, [table(kernel, configs)], stats, "unused", "unused")


def main() -> None:
    results, counts = {}, {}
    d_stats, e_stats = OpStats("decode_attention"), OpStats("extend_attention")
    # Batch 1 -> h16n32w4s2, batch 3 -> h32n16w8s1 (BLOCK_H 32 > 8 q heads a kv head: grid axis 1 recomputed),
    # batch 64 keeps SGLang's pick ("").
    d_patch = patch_of("decode_attention", {1: "h16n32w4s2", 3: "h32n16w8s1", 64: ""}, d_stats)
    for batch, kv_len in ((1, 33), (3, 45)):
        results[f"decode sglang {batch}x{kv_len}"] = decode(batch, kv_len, None)
        results[f"decode patched {batch}x{kv_len}"] = decode(batch, kv_len, d_patch)
    # The extend key is the longest extend length in SGLang's BLOCK_M rows (128 on an H100 at head dim 64):
    # 37 rows -> 128 -> m16n32w4s1 (grid axis 2 in 16-row blocks), 200 rows -> 256 -> m64n16w8s2.
    e_patch = patch_of("extend_attention", {128: "m16n32w4s1", 256: "m64n16w8s2"}, e_stats)
    for rows, prefix in ((37, 20), (200, 0)):
        results[f"extend sglang {rows}x{prefix}"] = extend(rows, prefix, None)
        results[f"extend patched {rows}x{prefix}"] = extend(rows, prefix, e_patch)
    counts = {"decode": [d_stats.calls, d_stats.kernel_calls], "extend": [e_stats.calls, e_stats.kernel_calls]}
    # The control: a configure that keeps SGLang's grid under a smaller BLOCK_M leaves rows unwritten.
    attn_launch.configure = lambda kernel, grid, kwargs, config: (grid, dict(kwargs, **config.launch()))
    broken = patch_of("extend_attention", {128: "m16n32w4s1"}, OpStats("extend_attention"))
    results["extend broken-grid 37x20"] = extend(37, 20, broken)
    json.dump({"worst": results, "counts": counts}, sys.stdout)


if __name__ == "__main__":
    main()
