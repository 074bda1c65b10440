"""FP8 quantization: the fp64 reference of SGLang's `sglang_per_token_group_quant_fp8` (extract/
per_token_group_quant_fp8.toml) and the layouts its scales come in."""
from __future__ import annotations

import torch

FP8_E4M3_MAX = 448.0
"""torch.finfo(torch.float8_e4m3fn).max: SGLang's fp8_max on CUDA."""
TMA_ALIGN = 4
"""Column-major, TMA-aligned scales: each group's column of token scales starts on 16 bytes (4 floats)."""


def per_token_group_quant_fp8(x: torch.Tensor, group_size: int, eps: float, column_major_scales: bool,
                              scale_tma_aligned: bool, x_q: torch.Tensor, x_s: torch.Tensor) -> None:
    """Per token and per group of `group_size` features: scale = max(amax(|x|), eps) / 448,
    x_q = clamp(x / scale, -448, 448) (rounded to fp8 by the output's dtype), x_s = scale. The layout flags only
    say how x_s was allocated (`allocate_scales`); values are written through x_s's strides whatever they are."""
    tokens, hidden = x.shape
    groups = x.double().reshape(tokens, hidden // int(group_size), int(group_size))
    scale = groups.abs().amax(dim=-1).clamp(min=float(eps)) / FP8_E4M3_MAX
    x_q.copy_((groups / scale[..., None]).clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX).reshape(tokens, hidden))
    x_s.copy_(scale)


def allocate_scales(x: torch.Tensor, group_size: int, eps: float = 1e-10, column_major_scales: bool = False,
                    scale_tma_aligned: bool = False) -> torch.Tensor:
    """x_s as SGLang lays it out for these flags (fp32 scales): [tokens, groups] row-major; column-major, a
    transposed [groups, tokens] buffer; column-major TMA-aligned, the same with each column padded to
    TMA_ALIGN tokens (what DeepGEMM reads on Hopper). The patch layer calls it for a call that passes no x_s."""
    tokens, groups = x.shape[0], x.shape[-1] // int(group_size)
    if not column_major_scales:
        return torch.empty(tokens, groups, dtype=torch.float32, device=x.device)
    rows = -(-tokens // TMA_ALIGN) * TMA_ALIGN if scale_tma_aligned else tokens
    return torch.empty(groups, rows, dtype=torch.float32, device=x.device).t()[:tokens]
