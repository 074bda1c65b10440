"""Fused MoE's screening order at one batch size: SGLang's pick first, then every config SGLang ships for any GPU
and expert shape (the nearest key of each file: this expert shape's files first), then the rest of the space by
a cost model; configs that cannot fit in shared memory, those the model calls hopeless, and at batch 1 those of
more than 16 rows (`padded_only`) are dropped.

The cost model (`predict_us`) is a roofline per GEMM (fused MoE runs two: gate/up [2N x H] and down [H x N]):
- work: the padded rows SGLang's moe_align_block_size makes (each expert's tokens rounded up to BLOCK_SIZE_M,
  in expectation over uniform routing) times the GEMM's N x K, on tensor cores at an efficiency that grows with
  the tile's FLOPs per byte (bm*bn/(bm+bn)) and drops for tiles under 64 rows (Hopper's wgmma needs 64; narrower
  ones run mma.sync);
- bytes: the weights of the experts hit, read again for every group of GROUP_SIZE_M row blocks unless one
  expert's weights fit in half the L2, the activations and the output; DRAM bursts are used in full only by
  rows of 128 elements (BLOCK_SIZE_K: the weights are K-major); memory and compute overlap imperfectly (a fifth of
  the lesser adds), so padded rows cost even where memory bounds the call;
- occupancy: blocks per SM from shared memory (stages x the A and B tiles), warps and estimated registers
  (the fp32 accumulator); wave quantization over the SM count; bandwidth an SM can draw and the bytes its
  pipeline keeps in flight (Little's law), and the K loop's latency per wave.
Only the order comes from it: every config screened is measured.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path

from astra_sglang.optimize.tuner.order import Ordered, order
from astra_sglang.triton.moe import configs as moe_configs
from astra_sglang.triton.moe.shapes import MoeShape
from astra_sglang.triton.moe.space import SMEM_BYTES, SPACES, TRITON_DEFAULTS, MoeConfig, hopper

PRUNE = 8.0
"""Configs predicted slower than this x the best prediction are not screened (the model errs by less than 2x on
block-size waste, the only term that grows this large)."""
FIXED_US = 10.0
"""Routing alignment, activation and the top-k sum around the two GEMMs: the same for every config."""
LATENCY_US = 0.7
"""DRAM latency the pipeline must cover (Little's law)."""
ITER_US = 0.25
"""One K-loop iteration's latency when nothing overlaps it."""
OVERLAP = 0.2
"""The share of the lesser of memory and compute time that does not hide under the greater."""


@dataclass(frozen=True)
class GpuModel:
    name: str = "NVIDIA H100 80GB HBM3"
    sms: int = 132
    smem_block: int = SMEM_BYTES
    smem_sm: int = 228 * 1024
    regs_sm: int = 65536
    l2_bytes: int = 50 * 2**20
    bandwidth: float = 3.35e12
    tensor_flops: float = 989e12
    """bf16 dense tensor-core peak."""
    wgmma: bool = True
    """Hopper: tiles of 64 rows and more run on wgmma, which holds every pipeline stage in shared memory."""


PEAKS = {"H200": (4.8e12, 989e12), "H100": (3.35e12, 989e12)}
"""Datasheet peaks (SXM parts): HBM bandwidth in B/s and dense bf16 tensor-core FLOP/s, by a name's part; any other
GPU is modelled as an H100 (only the order and the roofline's floor depend on them)."""


def gpu_model(name: str, smem: int | None = None) -> GpuModel:
    """H200: H100's SMs with 4.8 TB/s; anything else is modelled as an H100, on wgmma only if it is a Hopper."""
    bandwidth, flops = next((v for k, v in PEAKS.items() if k in name), PEAKS["H100"])
    return GpuModel(name=name, bandwidth=bandwidth, tensor_flops=flops, smem_block=smem or SMEM_BYTES,
                    wgmma=hopper(name))


@functools.lru_cache(maxsize=4096)
def expected_blocks(tokens: int, experts: int, topk: int, block_m: int) -> float:
    """E[ceil(rows / block_m)] of one expert, its rows ~ Binomial(tokens, topk / experts)."""
    p = min(1.0, topk / experts)
    if p >= 1.0:
        return math.ceil(tokens / block_m)
    total, log_q, log_p = 0.0, math.log1p(-p), math.log(p)
    for x in range(1, tokens + 1):
        log_pmf = math.lgamma(tokens + 1) - math.lgamma(x + 1) - math.lgamma(tokens - x + 1) + x * log_p + \
            (tokens - x) * log_q
        if log_pmf < -40 and x > tokens * p:
            break
        total += math.exp(log_pmf) * math.ceil(x / block_m)
    return total


def registers(config: MoeConfig) -> int:
    """Per thread: the fp32 accumulator, half the operand tiles (bf16 pairs), addressing."""
    warps = config.warps or TRITON_DEFAULTS["warps"]
    threads = warps * 32
    tiles = config.block_m * config.block_k + config.block_k * config.block_n
    return int(32 + config.block_m * config.block_n / threads + tiles / threads / 2)


def _gemm_us(config: MoeConfig, tokens: int, shape: MoeShape, n_out: int, k: int, a_bytes: float,
             gpu: GpuModel) -> float:
    bm, bn, bk = config.block_m, config.block_n, config.block_k
    warps = config.warps or TRITON_DEFAULTS["warps"]
    stages = config.stages or TRITON_DEFAULTS["stages"]
    experts, topk = shape.experts, shape.topk
    used = experts * (1.0 - (1.0 - min(1.0, topk / experts)) ** tokens)
    blocks = experts * expected_blocks(tokens, experts, topk, bm)
    programs = blocks * math.ceil(n_out / bn)
    per_expert = blocks / max(used, 1e-9)
    weight = n_out * k * 2
    reuse = per_expert if weight <= gpu.l2_bytes / 2 else min(per_expert, max(config.group_m, 1))
    nbytes = used * weight * per_expert / max(reuse, 1.0) + a_bytes + tokens * topk * n_out * 2
    flops = 2.0 * blocks * bm * n_out * k

    smem = stages * (bm * bk + bk * bn) * 2
    regs = registers(config)
    cap = config.maxnreg or 255
    spill = regs > cap
    per_block_regs = min(regs, cap) * warps * 32
    occupancy = max(1, min(gpu.smem_sm // max(smem, 1), 64 // warps, gpu.regs_sm // per_block_regs, 32))
    slots = gpu.sms * occupancy
    waves = math.ceil(programs / slots)
    util = programs / (waves * slots)

    per_sm = 2.5 * gpu.bandwidth / gpu.sms
    inflight = min(occupancy, math.ceil(programs / gpu.sms)) * max(stages - 1, 1) * (bm * bk + bk * bn) * 2
    hide = min(1.0, inflight / (per_sm * LATENCY_US * 1e-6))
    # Weights are K-major: a tile row is BLOCK_SIZE_K contiguous elements; short rows waste DRAM bursts.
    contiguity = 0.8 + 0.2 * min(1.0, bk * 2 / 256)
    bandwidth = min(gpu.bandwidth, min(gpu.sms, programs) * per_sm) * hide * contiguity
    # Tensor cores are fed from shared memory: a tile's FLOPs per byte loaded is bm*bn/(bm+bn).
    intensity = bm * bn / (bm + bn)
    efficiency = 0.9 * intensity / (intensity + 16) * (1.0 if bm >= 64 else 0.6)
    if warps == 8 and bm * bn < 64 * 128:
        efficiency *= 0.8  # more warps than the tile has work for
    t_mem = nbytes / bandwidth
    t_comp = flops / (gpu.tensor_flops * efficiency * util)
    t_lat = waves * math.ceil(k / bk) * ITER_US * 1e-6 / max(stages - 1, 1)
    bound = max(t_mem, t_comp, t_lat)
    return (bound + OVERLAP * (t_mem + t_comp - max(t_mem, t_comp))) * 1e6 * (3.0 if spill else 1.0)


def predict_us(config: MoeConfig, tokens: int, shape: MoeShape, gpu: GpuModel) -> float:
    """Predicted time of one fused MoE call with `config` for both GEMMs (as SGLang's tuner runs it)."""
    up = _gemm_us(config, tokens, shape, 2 * shape.inter, shape.hidden, tokens * shape.hidden * 2, gpu)
    down = _gemm_us(config, tokens, shape, shape.hidden, shape.inter, tokens * shape.topk * shape.inter * 2, gpu)
    return FIXED_US + up + down


def infeasible(config: MoeConfig, gpu: GpuModel, element: int = 2) -> str | None:
    need = config.smem_bytes(element, wgmma=gpu.wgmma)
    if need > gpu.smem_block:
        return f"shared memory: {need // 1024} KiB a block > {gpu.smem_block // 1024} KiB"
    return None


def padded_only(config: MoeConfig, tokens: int, shape: MoeShape, gpu: GpuModel) -> str | None:
    """At batch 1 each expert the token routes to gets one row: any BLOCK_SIZE_M makes one block per expert, the
    same grid and the same weight reads, and rows past the first 16 are padding. So on Hopper, for unquantized
    calls, a config of more rows is dropped: its 16-row twin (the same N, K, group, warps, stages) does the same
    with less. Held to measurement: SGLang's 100 Hopper bf16 files all pick 16 rows at key 1; in our H200 screens
    at batch 1 (2026-11-27, moe-bar page: Qwen3-30B-A3B, DeepSeek-V2-Lite, Mixtral TP2) the fastest config of 32
    rows or more was 2.9-10.3% slower than the fastest of 16, and 3.2% in SGLang's own whole-space loop for
    Mixtral TP2. fp8_w8a8 keeps them (SGLang's Triton 3.1 H200 fp8 files pick 64 rows at batch 1)."""
    if tokens == 1 and config.block_m > 16 and gpu.wgmma and not shape.quantized:
        return "padded rows only: at batch 1 its 16-row twin makes the same blocks with less"
    return None


def shipped_seeds(tokens: int, shape: MoeShape, config_dir: Path | None = None) -> list[MoeConfig]:
    """The config at the key nearest `tokens` of every file SGLang ships (any GPU, Triton version, expert shape,
    quantization): this expert shape's files first, those of its quantization before the others, newest Triton
    first."""
    root = Path(config_dir or moe_configs.default_config_dir()) / "configs"
    selector = moe_configs.dtype_selector(shape.config_dtype)
    files = sorted(root.glob("triton_*/E=*.json"), key=lambda p: (
        not p.name.startswith(f"E={shape.experts},N={shape.inter},"),
        (selector not in p.name) if selector else ("dtype=" in p.name),
        [-x for x in moe_configs._version_key(p.parent.name)], p.name))
    out: list[MoeConfig] = []
    for path in files:
        try:
            table = moe_configs.read(path)
            config = MoeConfig.from_sglang(table[moe_configs.nearest(table, tokens)])
        except Exception:  # noqa: BLE001 - a file of another kernel's format is no seed
            continue
        if config not in out:
            out.append(config)
    return out


def ordered(shape: MoeShape, tokens: int, pick: MoeConfig, gpu: GpuModel, space: str = "sglang",
            prune: float | None = PRUNE, config_dir: Path | None = None) -> Ordered[MoeConfig]:
    return order([pick], shipped_seeds(tokens, shape, config_dir), SPACES[space](),
                 cost=lambda c: predict_us(c, tokens, shape, gpu),
                 # fp8 tiles: a byte an element
                 infeasible=lambda c: infeasible(c, gpu, shape.weight_bytes) or padded_only(c, tokens, shape, gpu),
                 code=MoeConfig.code, prune_factor=prune)

