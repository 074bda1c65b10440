"""The floor of one fused MoE call at a batch size, and how far SGLang's pick is from it: where the pick runs near
its floor no config can gain much, so the tiers screen first where it runs farthest from it.

The floor is the longer of two times on the GPU's datasheet peaks (moe_order.PEAKS):
- memory: the weights of the experts the batch touches, E x (1 - (1 - k/E)^B) in expectation for B tokens routed
  to k of E experts uniformly (the screening's and SGLang's tuner's routing), each expert's w1 (2N x hidden) and
  w2 (hidden x N); and the activations SGLang's two GEMMs read and write: the hidden states in, per routed token
  slot the gate/up output (2N), the down projection's input (N) and its output (hidden); all in the dtype;
- compute: 2 x (B x k) x 3N x hidden FLOPs at the dense tensor-core peak.
Mixtral-8x7B's experts at batch 64 touch all 8: 8 x 3 x 14336 x 4096 x 2 B = 2.82 GB, 590 us at an H200's
4.8 TB/s; SGLang's pick screened at 665.6 us there (2026-11-27, commit 45b7284), 89% of the floor's speed.
"""
from __future__ import annotations

from dataclasses import dataclass

from astra_sglang.optimize.tuner.moe_order import gpu_model
from astra_sglang.triton.moe.shapes import MoeShape

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float8_e4m3fn": 1, "float32": 4}


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


def experts_touched(experts: int, topk: int, tokens: int) -> float:
    """E x (1 - (1 - k/E)^B): an expert is missed by each token with probability 1 - k/E."""
    return experts * (1.0 - (1.0 - min(1.0, topk / experts)) ** tokens)


def floor(shape: MoeShape, tokens: int, gpu: str) -> Floor:
    size = DTYPE_BYTES.get(shape.dtype, 2)
    # fp8_w8a8: weights stored in one byte and the GEMMs run on fp8 tensor cores (Hopper: twice bf16's rate); the
    # activations around them stay in shape.dtype, counted so (a floor a little high there, never too low)
    weight_size, rate = (1, 2.0) if shape.quant else (size, 1.0)
    n, hidden = shape.inter, shape.hidden
    touched = experts_touched(shape.experts, shape.topk, tokens)
    slots = tokens * shape.topk
    weights = touched * 3 * n * hidden * weight_size
    activations = (tokens * hidden + slots * (2 * n + n + hidden)) * size
    flops = 2.0 * slots * 3 * n * hidden
    model = gpu_model(gpu)
    memory_s, compute_s = (weights + activations) / model.bandwidth, flops / (model.tensor_flops * rate)
    return Floor(us=max(memory_s, compute_s) * 1e6, bound="memory" if memory_s >= compute_s else "compute",
                 bytes=weights + activations, flops=flops, experts=touched)
