"""Input generators onboarded specs name (`init = { kind = "generator", function = "..." }`)."""
from __future__ import annotations

import torch


def probabilities(shape: tuple[int, ...], dtype: torch.dtype, gen: torch.Generator, dims: dict[str, int]
                  ) -> torch.Tensor:
    """Rows of the last axis that are probability distributions (a softmax of normal logits, in fp32): what a
    sampling op's `probs` holds. Values are distinct almost surely, so which k are the top k is well defined."""
    logits = torch.randn(shape, generator=gen, device=gen.device, dtype=torch.float32) * 2.0
    return torch.softmax(logits, dim=-1)
