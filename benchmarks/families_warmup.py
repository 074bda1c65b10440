"""SGLang's ops of the given families called once each on the GPU, before benchmarks/gpu/families.sh times them:
their JIT kernels compile here (cached on disk for the later steps) and their libraries load, outside the
timing budget. One function per op (WARMUPS); a family without an entry needs no warm-up.

Usage (GPU machine, repo root): python3 benchmarks/families_warmup.py OP [OP ...]
"""
from __future__ import annotations

import sys
from typing import Callable

import torch

from astra_sglang.ops import adapters

HIDDEN = 4096


def _x(tokens: int = 4, width: int = 2 * HIDDEN) -> torch.Tensor:
    return torch.randn(tokens, width, device="cuda", dtype=torch.bfloat16)


def _gated(name: str) -> Callable[[], None]:
    def run() -> None:
        getattr(adapters, name)(_x(), torch.empty(4, HIDDEN, device="cuda", dtype=torch.bfloat16))
    return run


def _gemma_norm(fused: bool) -> Callable[[], None]:
    def run() -> None:
        import sgl_kernel

        w = torch.zeros(HIDDEN, device="cuda", dtype=torch.bfloat16)
        if fused:
            sgl_kernel.gemma_fused_add_rmsnorm(_x(width=HIDDEN), _x(width=HIDDEN), w, 1e-6)
        else:
            sgl_kernel.gemma_rmsnorm(_x(width=HIDDEN), w, 1e-6)
    return run


def _group_quant() -> None:
    """SGLang's JIT per_token_group_quant compiles one module per (dtype, scale layout): every combination
    the steps call (bf16 and fp16, row- and column-major / TMA-aligned scales), and its per-token kernel."""
    from astra_sglang.ops.quant import allocate_scales

    for dtype in (torch.bfloat16, torch.float16):
        for tokens, width in ((4, 7168), (4, 128)):
            x = torch.randn(tokens, width, device="cuda", dtype=dtype)
            for layout in ((False, False), (True, False), (True, True)):
                x_q = torch.empty(x.shape, device="cuda", dtype=torch.float8_e4m3fn)
                x_s = allocate_scales(x, 128, 1e-10, *layout)
                adapters.sglang_per_token_group_quant_fp8(x, 128, 1e-10, *layout, x_q, x_s)


WARMUPS: dict[str, Callable[[], None]] = {
    "gelu_and_mul": _gated("sglang_gelu_and_mul"),
    "gelu_tanh_and_mul": _gated("sglang_gelu_tanh_and_mul"),
    "gemma_rmsnorm": _gemma_norm(fused=False),
    "gemma_fused_add_rmsnorm": _gemma_norm(fused=True),
    "per_token_group_quant_fp8": _group_quant,
}


def main(ops: list[str]) -> int:
    for op in ops:
        if op in WARMUPS:
            WARMUPS[op]()
            print(f"warm-up: {op}")
    torch.cuda.synchronize()
    print("warm-up done")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
