"""benchmarks/gpu/families.sh's warm-up: SGLang's op for each family run once, outside the timed budget, so that its
JIT kernels compile (cached on disk for the steps) and its libraries load before anything is timed.

Usage (GPU machine, repo root): python3 benchmarks/families_warmup.py OP...
Each op's warm-up is one function in WARMUPS; an op without one is named and skipped.
"""
from __future__ import annotations

import importlib
import sys
from collections.abc import Callable

import torch

DEVICE, DTYPE = "cuda", torch.bfloat16


def gated_gelu(name: str) -> Callable[[], None]:
    """SGLang's JIT gelu activation (astra_sglang.ops.adapters.NAME) at Gemma-2-9B's width."""
    def run() -> None:
        from astra_sglang.ops import adapters

        x = torch.randn(4, 2 * 4096, device=DEVICE, dtype=DTYPE)
        getattr(adapters, name)(x, torch.empty(4, 4096, device=DEVICE, dtype=DTYPE))
    return run


def gemma_rmsnorm() -> None:
    import sgl_kernel

    x, w = torch.randn(4, 4096, device=DEVICE, dtype=DTYPE), torch.zeros(4096, device=DEVICE, dtype=DTYPE)
    sgl_kernel.gemma_rmsnorm(x, w, 1e-6)


def gemma_fused_add_rmsnorm() -> None:
    import sgl_kernel

    x, r = (torch.randn(4, 4096, device=DEVICE, dtype=DTYPE) for _ in range(2))
    sgl_kernel.gemma_fused_add_rmsnorm(x, r, torch.zeros(4096, device=DEVICE, dtype=DTYPE), 1e-6)


def topk_softmax() -> None:
    """SGLang's topk_softmax (sgl_kernel's, through its kernel registry) on both of its paths: a power-of-two
    expert count (one kernel) and Qwen1.5-MoE's 60 (softmax into a workspace, then the top-k kernel)."""
    from astra_sglang.ops.adapters import KERNEL_BASELINES

    module, name = KERNEL_BASELINES["topk_softmax"].removeprefix("py:").split(":")
    op = getattr(importlib.import_module(module), name)
    for experts, k in ((8, 2), (128, 8), (60, 4)):
        gating = torch.randn(4, experts, device=DEVICE, dtype=DTYPE)
        op(torch.empty(4, k, device=DEVICE, dtype=torch.float32), torch.empty(4, k, device=DEVICE, dtype=torch.int32),
           gating, True)


WARMUPS: dict[str, Callable[[], None]] = {
    "gelu_and_mul": gated_gelu("sglang_gelu_and_mul"),
    "gelu_tanh_and_mul": gated_gelu("sglang_gelu_tanh_and_mul"),
    "gemma_rmsnorm": gemma_rmsnorm,
    "gemma_fused_add_rmsnorm": gemma_fused_add_rmsnorm,
    "topk_softmax": topk_softmax,
}


def main(ops: list[str]) -> int:
    for op in ops:
        if op not in WARMUPS:
            print(f"warm-up: none for {op}")
            continue
        WARMUPS[op]()
    torch.cuda.synchronize()
    print("warm-up done")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
