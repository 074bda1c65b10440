"""Peers a user could pick instead of our kernels, as harness baselines (`py:MODULE:FUNC`): Liger-Kernel's
Triton ops (written against liger-kernel 0.8.5) and torch.compile. Each takes the spec's arguments in order
and writes its outputs in place, like baselines/adapters.py.

Liger's public forwards return new tensors (Y, and S for the residual) where SGLang's ops write in place.
Calling them and copying back would time 1-2 copy kernels a Liger user never runs (about doubling the
traffic of these memory-bound ops), so each adapter launches Liger's own forward kernel exactly as its public
forward does (same kernel choice, block size, warps, stages; casting mode "llama", Liger's default) with the
output pointers aimed at the spec's buffers. The per-row RSTD that Liger saves for backward is kept: a user of
its forward pays that write too.
"""
from __future__ import annotations

from collections.abc import Callable

import torch

PEERS = {
    op: {"liger": f"py:astra_sglang.baselines.peers:liger_{op}",
         "torch.compile": f"py:astra_sglang.baselines.peers:compiled_{op}"}
    for op in ("silu_and_mul", "rmsnorm", "fused_add_rmsnorm")
}

LIGER_CASTING = "llama"  # LigerRMSNorm / LigerFusedAddRMSNorm default: rstd in fp32, the rest in T


def _rows(t: torch.Tensor, width: int) -> torch.Tensor:
    # Liger's autograd wrappers make inputs contiguous first (a copy); the harness's buffers always are.
    if not t.is_contiguous() or t.shape[-1] != width:
        raise ValueError(f"expected a contiguous [..., {width}] tensor, got {tuple(t.shape)} {t.stride()}")
    return t.view(-1, width)


def _rstd(rows: int, device) -> torch.Tensor:
    return torch.empty(rows, dtype=torch.float32, device=device)  # fp32 in the llama / gemma casting modes


# --- Liger-Kernel -----------------------------------------------------------------------------------------


def liger_silu_and_mul(input, out) -> None:
    """Liger's fused gate|up SwiGLU forward (LigerFusedGateUpSiLUMulFunction, its Megatron path: reads the
    [T, 2d] buffer in place, no chunk copies), launched as swiglu_fused_gate_up_forward does, into `out`.
    No copy. (Its HF path, chunk + LigerSiLUMulFunction, would copy both halves to contiguous first.)"""
    from liger_kernel.ops.swiglu import _swiglu_fused_gate_up_forward_kernel, calculate_settings

    d = out.shape[-1]
    x, y = _rows(input, 2 * d), _rows(out, d)
    block, warps = calculate_settings(d)  # RuntimeError past 65536 columns: reported as not covered
    _swiglu_fused_gate_up_forward_kernel[(x.shape[0],)](
        x, y, x.stride(0), y.stride(0), ffn_size=d, BLOCK_SIZE=block, num_warps=warps)


def liger_rmsnorm(input, weight, eps, out) -> None:
    """Liger's RMSNorm forward (rms_norm_forward's row or 16-row-block kernel, same rule), writing into
    `out`. No copy."""
    import triton
    from liger_kernel.ops import rms_norm as lg

    d = weight.shape[0]
    x, y = _rows(input, d), _rows(out, d)
    n_rows = x.shape[0]
    block, warps = lg.calculate_settings(d)
    rstd = _rstd(n_rows, x.device)
    args = (y, y.stride(0), x, x.stride(0), weight, weight.stride(0), rstd, rstd.stride(0))
    mode = lg._str_to_casting_mode[LIGER_CASTING]
    if block > 256 or n_rows < 4096 * 8:  # rms_norm_forward's choice with row_mode=None
        lg._rms_norm_forward_kernel[(n_rows,)](
            *args, d, eps, 0.0, mode, elementwise_affine=True, BLOCK_SIZE=block, num_warps=warps)
    else:
        lg._block_rms_norm_forward_kernel[(triton.cdiv(n_rows, 16),)](
            *args, n_rows, d, eps, 0.0, mode, elementwise_affine=True, BLOCK_SIZE=block, BLOCK_ROW=16,
            num_warps=warps)


def liger_fused_add_rmsnorm(input, residual, weight, eps) -> None:
    """Liger's fused add + RMSNorm forward kernel (fused_add_rms_norm_forward's launch) with its outputs
    aimed in place: Y -> input, S (the sum) -> residual. No copy for rows of more than 64 elements.

    Why in place is safe there: each program owns one row; Y is stored after the row's reduction (all
    loads done), and S[i] depends only on input[i] and residual[i], loaded by the one thread that stores it,
    since calculate_settings gives >= 32 * num_warps block columns (no replicated layout) from 65 columns up.
    Rows of <= 64 elements (replicated layouts, a cross-warp race) take Liger's public forward + 2 copies."""
    from liger_kernel.ops import fused_add_rms_norm as lg

    d = weight.shape[0]
    x, r = _rows(input, d), _rows(residual, d)
    n_rows = x.shape[0]
    block, warps = lg.calculate_settings(d)
    if block < 32 * warps:
        y, s, *_ = lg.fused_add_rms_norm_forward(x, r, weight, eps, 0.0, LIGER_CASTING)
        x.copy_(y)
        r.copy_(s)
        return
    rstd = _rstd(n_rows, x.device)
    lg._fused_add_rms_norm_forward_kernel[(n_rows,)](
        x, x.stride(0), r, r.stride(0), x, x.stride(0), r, r.stride(0), weight, weight.stride(0),
        rstd, rstd.stride(0), d, eps, 0.0, lg._str_to_casting_mode[LIGER_CASTING],
        BLOCK_SIZE=block, num_warps=warps, num_stages=2)


# --- torch.compile -----------------------------------------------------------------------------------------
# fp32 math and the stores as copy_ into the spec's buffers inside the compiled region, so inductor writes
# them from its own kernel (a mutated graph input) instead of a separate copy.


def _silu_and_mul(input, out):
    d = out.shape[-1]
    x = input.float()
    out.copy_(torch.nn.functional.silu(x[..., :d]) * x[..., d:])


def _rms(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight.float()


def _rmsnorm(input, weight, eps, out):
    out.copy_(_rms(input.float(), weight, eps))


def _fused_add_rmsnorm(input, residual, weight, eps):
    total = input.float() + residual.float()  # the norm uses the fp32 sum; the residual is rounded to T
    residual.copy_(total)
    input.copy_(_rms(total, weight, eps))


_EAGER: dict[str, Callable] = {"silu_and_mul": _silu_and_mul, "rmsnorm": _rmsnorm,
                               "fused_add_rmsnorm": _fused_add_rmsnorm}
_COMPILED: dict[tuple[str, str], Callable] = {}


def compiled(op: str, backend: str = "inductor") -> Callable:
    """The op's torch.compile'd function, built once per process. dynamic=False: one kernel per shape,
    specialized as a serving engine's per-batch-size graphs are (and eps becomes a constant)."""
    key = (op, backend)
    if key not in _COMPILED:
        import torch._dynamo

        cfg = torch._dynamo.config
        # Each new shape recompiles. Past the default limit (8 per function) dynamo would silently run the
        # eager code: the harness's shape lists are longer, so raise it, and fail loudly if it is still hit.
        limit = "recompile_limit" if hasattr(cfg, "recompile_limit") else "cache_size_limit"
        setattr(cfg, limit, max(getattr(cfg, limit), 256))
        if hasattr(cfg, "fail_on_recompile_limit_hit") and not cfg.suppress_errors:  # the two conflict
            cfg.fail_on_recompile_limit_hit = True
        _COMPILED[key] = torch.compile(_EAGER[op], backend=backend, dynamic=False, fullgraph=True)
    return _COMPILED[key]


def compiled_silu_and_mul(input, out) -> None:
    """torch.compile (inductor) of fp32 silu(gate) * up, stored into `out` from the compiled kernel."""
    compiled("silu_and_mul")(input, out)


def compiled_rmsnorm(input, weight, eps, out) -> None:
    """torch.compile (inductor) of an fp32 RMSNorm, stored into `out` from the compiled kernel."""
    compiled("rmsnorm")(input, weight, eps, out)


def compiled_fused_add_rmsnorm(input, residual, weight, eps) -> None:
    """torch.compile (inductor) of residual += input; input = RMSNorm(residual), in place, fp32 math."""
    compiled("fused_add_rmsnorm")(input, residual, weight, eps)
