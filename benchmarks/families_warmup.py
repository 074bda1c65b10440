"""SGLang's own ops called once each before a benchmarks/gpu/families.sh run, outside its budget: SGLang's JIT kernels
compile at their first call for each template configuration (cached on disk for the steps that follow, which would
otherwise time or cut off the compile), and sgl_kernel's library loads. One function per op, handed the shape sets
the run times; an op without an entry needs no warm-up.

Usage (GPU machine, repo root): python3 benchmarks/families_warmup.py [--sets paper+quick+held_out] OP ...
"""
from __future__ import annotations

import argparse
import importlib
import sys
from typing import Callable

import torch

from astra_sglang.errors import describe

DEVICE, DTYPE = "cuda", torch.bfloat16  # the timed step and per_call.py run bf16 only


def _activation(name: str) -> Callable[[str], None]:
    def warm(sets: str) -> None:
        from astra_sglang.baselines import adapters

        x = torch.randn(4, 2 * 4096, device=DEVICE, dtype=DTYPE)
        getattr(adapters, f"sglang_{name}")(x, torch.empty(4, 4096, device=DEVICE, dtype=DTYPE))
    return warm


def _gemma_rmsnorm(sets: str) -> None:
    import sgl_kernel

    x, w = torch.randn(4, 4096, device=DEVICE, dtype=DTYPE), torch.zeros(4096, device=DEVICE, dtype=DTYPE)
    sgl_kernel.gemma_rmsnorm(x, w, 1e-6)


def _gemma_fused_add_rmsnorm(sets: str) -> None:
    import sgl_kernel

    x, w = torch.randn(4, 4096, device=DEVICE, dtype=DTYPE), torch.zeros(4096, device=DEVICE, dtype=DTYPE)
    sgl_kernel.gemma_fused_add_rmsnorm(x, torch.randn_like(x), w, 1e-6)


def _rotary_embedding(sets: str) -> None:
    """SGLang's fused rope JIT-compiles per (is_neox, rotary width, dtype): every head_dim of the timed sets, bf16,
    neox (the spec's default, and Llama's), through the harness's adapter."""
    from astra_sglang.baselines.adapters import sglang_rotary_embedding
    from astra_sglang.references.rope import cos_sin_cache
    from astra_sglang.specs.registry import get_spec, resolve_shapes

    spec = get_spec("rotary_embedding")
    head_dims = sorted({dict(zip(spec.dims, shape))["head_dim"] for shape in resolve_shapes(spec, sets)} or {128})
    gen = torch.Generator(device=DEVICE)
    for head_dim in head_dims:
        q = torch.randn(2, 4, head_dim, device=DEVICE, dtype=DTYPE)
        k = torch.randn(2, 1, head_dim, device=DEVICE, dtype=DTYPE)
        cache = cos_sin_cache((16, head_dim), torch.float32, gen, {}).float()
        sglang_rotary_embedding(q, k, cache, torch.arange(2, device=DEVICE), True, 0)
        print(f"rotary_embedding: SGLang's rope built for head_dim {head_dim}")


def _topk_softmax(sets: str) -> None:
    """SGLang's topk_softmax (through its kernel registry) on both of its paths: a power-of-two expert count (one
    kernel) and Qwen1.5-MoE's 60 (softmax into a workspace, then the top-k kernel)."""
    from astra_sglang.baselines.adapters import KERNEL_BASELINES

    module, name = KERNEL_BASELINES["topk_softmax"].removeprefix("py:").split(":")
    op = getattr(importlib.import_module(module), name)
    for experts, k in ((8, 2), (128, 8), (60, 4)):
        gating = torch.randn(4, experts, device=DEVICE, dtype=DTYPE)
        op(torch.empty(4, k, device=DEVICE, dtype=torch.float32), torch.empty(4, k, device=DEVICE, dtype=torch.int32),
           gating, True)


def _group_quant(sets: str) -> None:
    """SGLang's JIT per_token_group_quant compiles one module per (dtype, scale layout): the combinations the steps
    call SGLang's op with (bf16; row-major scales, the spec's default, in the timed step; column-major TMA-aligned
    ones in per_call.py's DeepGEMM call; the checks run against our reference kernel), and its per-token kernel."""
    from astra_sglang.baselines import adapters
    from astra_sglang.references.quant import allocate_scales

    for tokens, width in ((4, 7168), (4, 128)):
        x = torch.randn(tokens, width, device=DEVICE, dtype=DTYPE)
        for layout in ((False, False), (True, True)):
            x_q = torch.empty(x.shape, device=DEVICE, dtype=torch.float8_e4m3fn)
            x_s = allocate_scales(x, 128, 1e-10, *layout)
            adapters.sglang_per_token_group_quant_fp8(x, 128, 1e-10, *layout, x_q, x_s)


WARMUPS: dict[str, Callable[[str], None]] = {
    "gelu_and_mul": _activation("gelu_and_mul"),
    "gelu_tanh_and_mul": _activation("gelu_tanh_and_mul"),
    "gemma_rmsnorm": _gemma_rmsnorm,
    "gemma_fused_add_rmsnorm": _gemma_fused_add_rmsnorm,
    "rotary_embedding": _rotary_embedding,
    "topk_softmax": _topk_softmax,
    "per_token_group_quant_fp8": _group_quant,
}
"""op -> its warm-up, called with the run's shape sets ("paper+quick+held_out")."""


def main(ops: list[str], sets: str) -> int:
    """Each op's warm-up; one that raises is named and the others still run (1 then)."""
    warmed, failed = [op for op in ops if op in WARMUPS], []
    for op in warmed:
        try:
            WARMUPS[op](sets)
            torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001 - the steps then time or report that op's first call
            failed.append(op)
            print(f"ERROR warm-up of {op}: {describe(exc)}")
    print(f"warm-up done: {' '.join(op for op in warmed if op not in failed) or 'nothing to warm'}")
    return 1 if failed else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ops", nargs="*")
    parser.add_argument("--sets", default="paper+quick+held_out", help="the shape sets the run times (%(default)s)")
    cli = parser.parse_args()
    sys.exit(main(cli.ops, cli.sets))
