"""SGLang's invoke_fused_moe_kernel with a split-K variant of its kernel: what the evaluator op and the live patch
put in the launcher's place.

`SplitLauncher(original, kernel, choose)` takes the launcher's arguments (SGLang 0.5.17's signature, by name) and
asks `choose` for the split of each GEMM call. Split 1 hands the call to SGLang's launcher unchanged (a variant of
another origin, `variant_at_one`, runs then too). The variant runs only where the call is a plain bf16/fp16
GEMM (`eligible`): no quantized weights or activations, no TMA descriptors or expert-sorted output, no fused add,
mask or all-reduce; anything else goes to SGLang's launcher. Where it runs, the kernel gets exactly the arguments SGLang's launcher passes for such a call
(`variant_args`), over a (blocks, SPLIT_K) grid into an fp32 workspace that the reduce kernel sums into C.
Under CUDA graphs the choice is made at capture, from what the call knows then (its token count and shapes).
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Callable

from astra_sglang.triton.moe import splitk
from astra_sglang.triton.moe.shapes import QUANT_FLAGS

INT32_MAX = 2**31 - 1
FUSED = ("a_use_tma", "b_use_tma", "c_sorted", "fuse_sum_all_reduce", "fuse_add_to_output", "mask_output",
         "lora_preserve_base")


@dataclass(frozen=True)
class GemmCall:
    """What the split choice sees of one launch: B is [experts, n, k]; the up projection has n = 2 N and
    k = hidden, the down projection n = hidden and k = N (never both: that would need N = 0)."""

    tokens: int
    experts: int
    n: int
    k: int
    dtype: str
    config: tuple[tuple[str, int], ...]
    """The config the launcher was handed (SGLang's lookup or an override), sorted items."""


Chooser = Callable[[GemmCall], int]


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def eligible(a: dict) -> str:
    """'' where a split may run the call whose bound arguments are `a`, else what rules it out."""
    for name in QUANT_FLAGS + FUSED:
        if a.get(name):
            return name
    if any(a.get(name) is not None for name in ("A_scale", "B_scale", "B_zp")):
        return "scales"
    if a["B"].ndim != 3 or a["A"].ndim != 2 or not a["C"].is_contiguous():
        return "layout"
    if a["topk_weights"].stride(1) != 1 or a["sorted_token_ids"].stride(0) != 1:
        return "layout"
    return ""


def variant_args(a: dict, split: int, c, stride_cm: int, stride_cn: int, stride_ck: int) -> tuple[tuple, dict]:
    """(grid, keyword arguments) of the variant's launch: what SGLang's launcher passes its kernel for a plain
    GEMM call, output `c` (C itself, or the workspace) and the split. Also what a compile-ahead step warms."""
    A, B, bias, config = a["A"], a["B"], a["bias"], a["config"]
    sorted_ids = a["sorted_token_ids"]
    n, k = B.shape[1], B.shape[2]
    kwargs = dict(
        a_ptr=A, a_desc=None, b_ptr=B, b_desc=None, bias_ptr=bias, c_ptr=c, a_scale_ptr=None, b_scale_ptr=None,
        topk_weights_ptr=a["topk_weights"], sorted_token_ids_ptr=sorted_ids, expert_ids_ptr=a["expert_ids"],
        num_tokens_post_padded_ptr=a["num_tokens_post_padded"], add_mask_ptr=a["add_output_mask"], N=n, K=k,
        EM=sorted_ids.shape[0], num_valid_tokens=a["topk_ids"].numel(), stride_am=A.stride(0), stride_ak=A.stride(1),
        stride_be=B.stride(0), stride_bk=B.stride(2), stride_bn=B.stride(1),
        stride_bias_e=bias.stride(0) if bias is not None else 0, stride_bias_n=bias.stride(1) if bias is not None else 0,
        stride_cm=stride_cm, stride_cn=stride_cn, stride_asm=0, stride_ask=0, stride_bse=0, stride_bsk=0, stride_bsn=0,
        group_n=0, group_k=0, MUL_ROUTED_WEIGHT=a["mul_routed_weight"], top_k=a["top_k"],
        compute_type=a["compute_type"], use_fp8_w8a8=False, use_int8_w8a8=False, use_int8_w8a16=False,
        per_channel_quant=a["per_channel_quant"], even_Ks=k % config["BLOCK_SIZE_K"] == 0, c_sorted=False,
        filter_expert=a["filter_expert"], swap_ab=False, FUSE_ADD_TO_OUTPUT=False, MASK_OUTPUT=False,
        FUSE_SUM_ALL_REDUCE=False, LORA_PRESERVE_BASE=False, ROUTER_TOPK=a["router_topk"], stride_ck=stride_ck,
        SPLIT_K=split, **config)
    grid = (_cdiv(sorted_ids.shape[0], config["BLOCK_SIZE_M"]) * _cdiv(n, config["BLOCK_SIZE_N"]), split)
    return grid, kwargs


class SplitLauncher:
    """SGLang's launcher behind a split choice (see the module docstring). `on_launch`, if given, is told of
    every call and whether the variant ran it."""

    PLANS = 4096
    """Call forms whose choice is kept (token count x weight shape x dtype x config)."""

    def __init__(self, original: Callable, kernel, choose: Chooser, on_launch: Callable[[bool], None] | None = None,
                 variant_at_one: bool = False):
        params = inspect.signature(original).parameters
        missing = [p for p in splitk.LAUNCHER_PARAMS if p not in params]
        if missing:
            raise splitk.SourceMismatch(f"SGLang's {splitk.LAUNCHER} has no parameter {', '.join(missing)}: "
                                        "the split-K launcher reproduces 0.5.17's")
        self.original, self.kernel, self.choose, self.on_launch = original, kernel, choose, on_launch
        self.variant_at_one = variant_at_one
        self.names = list(params)
        self.defaults = {k: p.default for k, p in params.items() if p.default is not inspect.Parameter.empty}
        self._plans: dict[tuple, int] = {}

    def bind(self, args: tuple, kwargs: dict) -> dict:
        bound = dict(self.defaults)
        bound.update(zip(self.names, args))
        bound.update(kwargs)
        return bound

    def split_for(self, a: dict) -> int:
        """The split the variant runs this call with; 0 where SGLang's launcher runs it."""
        if eligible(a):
            return 0
        A, B, config = a["A"], a["B"], a["config"]
        key = (a["topk_ids"].shape[0], tuple(B.shape), A.dtype, tuple(sorted(config.items())))
        if key not in self._plans:
            call = GemmCall(tokens=key[0], experts=B.shape[0], n=B.shape[1], k=B.shape[2],
                            dtype=str(A.dtype).removeprefix("torch."), config=key[3])
            split = max(1, int(self.choose(call)))
            if split * a["topk_ids"].numel() * B.shape[1] > INT32_MAX:  # the workspace's offsets are int32
                split = 1
            if len(self._plans) >= self.PLANS:
                self._plans.clear()
            self._plans[key] = split if split > 1 or self.variant_at_one else 0
        return self._plans[key]

    def __call__(self, *args, **kwargs):
        a = self.bind(args, kwargs)
        split = self.split_for(a)
        if self.on_launch is not None:
            self.on_launch(split > 0)
        if not split:
            return self.original(*args, **kwargs)
        self.run(a, split)

    def run(self, a: dict, split: int) -> None:
        """The variant on bound arguments `a`, with any split (1 included: then C is written directly)."""
        import torch

        C, B = a["C"], a["B"]
        n = B.shape[1]
        if split == 1:
            grid, kwargs = variant_args(a, 1, C, C.stride(-2), C.stride(-1), 0)
            self.kernel[grid](**kwargs)
            return
        from astra_sglang.triton.moe.splitk_reduce import reduce_into

        rows = a["topk_ids"].numel()
        ws = torch.empty((split, rows, n), dtype=torch.float32, device=C.device)
        grid, kwargs = variant_args(a, split, ws, n, 1, rows * n)
        self.kernel[grid](**kwargs)
        reduce_into(ws, C, rows, n, split)


def fixed(up: int, down: int, experts: int, inter: int, hidden: int) -> Chooser:
    """The evaluator's choice: `up` for the gate/up projection of this expert shape, `down` for the down one."""
    def choose(call: GemmCall) -> int:
        if call.experts != experts:
            return 1
        if (call.n, call.k) == (2 * inter, hidden):
            return up
        return down if (call.n, call.k) == (hidden, inter) else 1
    return choose
