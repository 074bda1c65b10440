"""FP8 quantization: the fp64 reference of SGLang's `sglang_per_token_group_quant_fp8` (extract/
per_token_group_quant_fp8.toml)."""
from __future__ import annotations

import torch

FP8_E4M3_MAX = 448.0
"""torch.finfo(torch.float8_e4m3fn).max: SGLang's fp8_max on CUDA."""


def per_token_group_quant_fp8(x: torch.Tensor, group_size: int, eps: float, x_q: torch.Tensor,
                              x_s: torch.Tensor) -> None:
    """Per token and per group of `group_size` features: scale = max(amax(|x|), eps) / 448,
    x_q = clamp(x / scale, -448, 448) (rounded to fp8 by the output's dtype), x_s = scale."""
    tokens, hidden = x.shape
    groups = x.double().reshape(tokens, hidden // int(group_size), int(group_size))
    scale = groups.abs().amax(dim=-1).clamp(min=float(eps)) / FP8_E4M3_MAX
    x_q.copy_((groups / scale[..., None]).clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX).reshape(tokens, hidden))
    x_s.copy_(scale)
