"""The floor of one fused MoE call at a batch size, and how far SGLang's pick is from it: where the pick runs near
its floor no config can gain much, so the tiers screen first where it runs farthest from it.

The floor is the longer of two times on the GPU's datasheet peaks (moe_order.PEAKS):
- memory: the weights of the experts the batch touches, E x (1 - (1 - k/E)^B) in expectation for B tokens routed
  to k of E experts uniformly (the screening's and SGLang's tuner's routing), each expert's w1 (2N x hidden) and
  w2 (hidden x N) (triton/cost.py's counts); and the activations SGLang's two GEMMs read and write: the hidden
  states in, per routed token slot the gate/up output (2N), the down projection's input (N) and its output
  (hidden), where cost.fused_moe's physics bound counts none of the intermediates (a fused kernel may keep them on
  chip; SGLang's runs two GEMMs through memory);
- compute: 2 x (B x k) x 3N x hidden FLOPs (cost.moe_flops) at the dense tensor-core peak.
Mixtral-8x7B's experts at batch 64 touch all 8: 8 x 3 x 14336 x 4096 x 2 B = 2.82 GB, 590 us at an H200's
4.8 TB/s; SGLang's pick screened at 665.6 us there (2026-11-27, commit 45b7284), 89% of the floor's speed.
"""
from __future__ import annotations

from dataclasses import dataclass

from astra_sglang.optimize.tuner.moe_order import gpu_model
from astra_sglang.triton.cost import expert_elements, experts_expected, moe_flops
from astra_sglang.triton.moe.shapes import MoeShape


@dataclass(frozen=True)
class Floor:
    us: float
    bound: str
    """"memory" or "compute": the longer of the two."""
    bytes: float
    flops: float
    experts: float
    """Experts touched, in expectation."""

    def share(self, us: float | None) -> float | None:
        """How close a call of `us` runs to the floor: floor / us (1.0 at the floor)."""
        return self.us / us if us else None


def floor(shape: MoeShape, tokens: int, gpu: str) -> Floor:
    # the weights in their stored width (fp8_w8a8: one byte) and the GEMMs at the rate of their inputs' type (fp8
    # tensor cores: twice bf16's); the activations around them stay in shape.dtype (a floor a little high with
    # fp8, never too low). The expected experts, not cost.experts_read's lower bound: an order, not a guard.
    n, hidden = shape.inter, shape.hidden
    touched = experts_expected(tokens, shape.experts, shape.topk)
    slots = tokens * shape.topk
    weights = touched * expert_elements(n, hidden) * shape.weight_bytes
    activations = (tokens * hidden + slots * (2 * n + n + hidden)) * shape.element_bytes
    flops = float(moe_flops(tokens, shape.topk, n, hidden))
    model = gpu_model(gpu)
    memory_s, compute_s = (weights + activations) / model.bandwidth, flops / (model.tensor_flops * shape.gemm_rate)
    return Floor(us=max(memory_s, compute_s) * 1e6, bound="memory" if memory_s >= compute_s else "compute",
                 bytes=weights + activations, flops=flops, experts=touched)
