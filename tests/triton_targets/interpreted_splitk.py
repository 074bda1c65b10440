"""Run by test_splitk_interpreted.py in a process of its own with TRITON_INTERPRET=1 (set before any kernel is
decorated): fused MoE on CPU tensors computed by SGLang's fused_moe_kernel as the split-K transform rewrites it,
launched by the replacement launcher (SplitLauncher.run) for both GEMMs, against the fp64 reference. The
alignment (SGLang's moe_align_block_size, a CUDA op) and the activation are done in torch here.
Cases: every split of the cases below; SGLang's kernel as it is (rendered untransformed) as a control that the
harness itself agrees; an agent-registered variant that advances its pointers by one tile instead of SPLIT_K
(must fail at split 2 and pass at split 1).
Prints one JSON object: {case: worst |out - ref| / (atol + rtol |ref|)}."""
from __future__ import annotations

import json
import sys

import torch
import triton.language as tl
from moe_standins import sglang_launcher

from astra_sglang.triton.moe import sources, splitk
from astra_sglang.triton.moe.reference import fused_moe as reference
from astra_sglang.triton.moe.reference import route
from astra_sglang.triton.moe.splitk_launch import SplitLauncher

TOL = {torch.float16: (8e-3, 5e-3), torch.float32: (1e-5, 1e-5)}
"""fp16: extract/fused_moe.toml's. fp32: the interpreter's numpy matmuls accumulate in fp32 over K <= 72 terms of
unit-scale products, whose rounding stays below 1e-6 of the output's scale."""
CONFIG = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 16, "GROUP_SIZE_M": 1}


def align(ids: torch.Tensor, block_m: int, experts: int):
    """What SGLang's moe_align_block_size returns: token slots sorted by expert, each expert's padded to a
    multiple of block_m with the sentinel numel; the expert of each block; the padded length."""
    flat = ids.flatten()
    size = flat.numel() + experts * (block_m - 1)
    sorted_ids = torch.full((size,), flat.numel(), dtype=torch.int32)
    expert_ids = torch.zeros(-(-size // block_m), dtype=torch.int32)
    at = 0
    for e in range(experts):
        slots = torch.nonzero(flat == e).flatten()
        if not len(slots):
            continue
        sorted_ids[at:at + len(slots)] = slots.to(torch.int32)
        blocks = -(-len(slots) // block_m)
        expert_ids[at // block_m:at // block_m + blocks] = e
        at += blocks * block_m
    return sorted_ids, expert_ids, torch.tensor([at], dtype=torch.int32)


def launcher(kernel) -> SplitLauncher:
    """A SplitLauncher around a stand-in of SGLang's launcher (its module needs CUDA-only imports); only its `run`
    is used here."""
    return SplitLauncher(sglang_launcher(), kernel, lambda call: 1)


def gemm_args(A, B, C, weights, ids, aligned, mul, top_k, dtype, config) -> dict:
    sorted_ids, expert_ids, padded = aligned
    return dict(A=A, B=B, bias=None, C=C, A_scale=None, B_scale=None, B_zp=None, topk_weights=weights,
                topk_ids=ids, sorted_token_ids=sorted_ids, expert_ids=expert_ids, num_tokens_post_padded=padded,
                mul_routed_weight=mul, top_k=top_k, config=config,
                compute_type=tl.float16 if dtype == torch.float16 else tl.float32, use_fp8_w8a8=False,
                use_int8_w8a8=False, use_int8_w8a16=False, use_int4_w4a16=False, per_channel_quant=False,
                block_shape=None, a_use_tma=False, b_use_tma=False, c_sorted=False, filter_expert=True,
                fuse_sum_all_reduce=False, router_topk=1, fuse_add_to_output=False, add_output_mask=None,
                mask_output=False, lora_preserve_base=False)


def moe(run, hidden, w1, w2, logits, topk, split, config=CONFIG):
    """Fused MoE as SGLang's fused_experts sequences it: gate/up GEMM, silu-and-mul, down GEMM with the routed
    weight, top-k sum; `run(args, split)` launches one GEMM."""
    tokens, dtype, inter = hidden.shape[0], hidden.dtype, w2.shape[2]
    ids, weights = route(logits, topk)
    ids, weights = ids.to(torch.int32), weights.float().contiguous()
    aligned = align(ids, config["BLOCK_SIZE_M"], w1.shape[0])
    cache1 = torch.empty(tokens * topk, 2 * inter, dtype=dtype)
    run(gemm_args(hidden, w1, cache1, weights, ids, aligned, False, topk, dtype, config), split[0])
    cache2 = (torch.nn.functional.silu(cache1[:, :inter].float()) * cache1[:, inter:].float()).to(dtype)
    cache3 = torch.empty(tokens, topk, hidden.shape[1], dtype=dtype)
    run(gemm_args(cache2, w2, cache3, weights, ids, aligned, True, 1, dtype, config), split[1])
    return cache3.float().sum(1)


def case(run, shape, dtype, split, seed=0, config=CONFIG) -> float:
    tokens, experts, inter, hidden_size, topk = shape
    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(tokens, hidden_size, generator=gen)
    w1 = torch.randn(experts, 2 * inter, hidden_size, generator=gen) * 0.2
    w2 = torch.randn(experts, hidden_size, inter, generator=gen) * 0.2
    logits = torch.randn(tokens, experts, generator=gen)
    out = moe(run, hidden.to(dtype), w1.to(dtype), w2.to(dtype), logits, topk, split, config)
    ref = hidden.to(dtype).double()
    reference(ref, w1.to(dtype).double(), w2.to(dtype).double(), logits.double(), torch.empty(tokens, topk,
                                                                                               dtype=torch.float64))
    atol, rtol = TOL[dtype]
    return float(((out.double() - ref).abs() / (atol + rtol * ref.abs())).max())


def verbatim_run(kernel):
    """SGLang's kernel untransformed: launched with SGLang's arguments only (no stride_ck / SPLIT_K)."""
    from astra_sglang.triton.moe.splitk_launch import variant_args

    def run(a, split):
        assert split == 1
        grid, kwargs = variant_args(a, 1, a["C"], a["C"].stride(-2), a["C"].stride(-1), 0)
        kernel[(grid[0],)](**{k: v for k, v in kwargs.items() if k not in splitk.ADDED})
    return run


SHAPES = [(1, 4, 48, 64, 2), (5, 6, 40, 72, 2), (3, 8, 64, 32, 1)]
SPLITS = [(1, 1), (1, 2), (2, 3), (1, 4)]


def main() -> None:
    results = {}
    variant = launcher(sources.kernel(sources.splitk_source())).run
    for shape in SHAPES:
        for dtype in (torch.float16, torch.float32):
            for split in SPLITS:
                results[f"splitk {shape} {str(dtype)[6:]} {split}"] = case(variant, shape, dtype, split)
    grouped = dict(CONFIG, GROUP_SIZE_M=4, BLOCK_SIZE_N=16)
    results["splitk grouped (5, 6, 40, 72, 2) float16 (3, 2)"] = case(variant, SHAPES[1], torch.float16, (3, 2),
                                                                      config=grouped)
    source = splitk.read(sources.installed_kernel_file())
    plain = sources.folder() / f"verbatim-{source.source_hash}.py"
    plain.write_text(splitk.render(source, source.kernel))
    for shape in SHAPES:
        results[f"verbatim {shape} float16"] = case(verbatim_run(sources.load(plain).fused_moe_kernel), shape,
                                                    torch.float16, (1, 1))
    text = sources.splitk_source().path.read_text()
    broken = sources.register(text.replace("BLOCK_SIZE_K * SPLIT_K * stride_ak", "BLOCK_SIZE_K * stride_ak"))
    run = launcher(sources.kernel(broken)).run
    for split in ((1, 1), (1, 2)):
        results[f"agent one-tile advance {split}"] = case(run, SHAPES[1], torch.float16, split)
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
