"""What the fused MoE screening benchmarks share: the expert shapes they run, and their simulated GPUs (the cost
model's times through the simulated screening launch, for --simulate on CPU; nothing there is a measurement)."""
from __future__ import annotations

import argparse
import json

from astra_sglang.optimize.tuner.moe_simulate import landscape_us
from astra_sglang.optimize.tuner.screen_worker_handle import WorkerSettings
from astra_sglang.triton.moe import configs as moe_configs
from astra_sglang.triton.moe.bar import PRESETS
from astra_sglang.triton.moe.shapes import MoeShape

SHAPES = {"qwen3": PRESETS["qwen3-30b-a3b"], "mixtral": MoeShape(8, 14336, 4096, 2), **PRESETS}
"""Qwen3-30B-A3B's experts (128 x 768, hidden 2048, top-8), Mixtral-8x7B's at TP1 (8 x 14336, 4096, top-2), and the
bar's shapes by their preset names (astra_sglang.triton.moe.bar.PRESETS: Mixtral-8x7B at TP2 in bf16 and fp8_w8a8,
Qwen3-30B-A3B, DeepSeek-V2-Lite)."""
SIMULATED_GPU = "NVIDIA H100 80GB HBM3"
SIMULATED_SMEM = 227 * 1024
SIMULATE = "astra_sglang.optimize.tuner.screen_simulate:SimulatedLaunch"


def simulate_lookup() -> None:
    """SGLang's config lookup answers for the simulated GPU (its files for that GPU are the picks)."""
    moe_configs.sglang_module().get_device_name = lambda: SIMULATED_GPU


def simulated_settings(shape: MoeShape, compile_s: float, call_s: float, faults: str = "{}",
                       per_bucket: bool = False) -> WorkerSettings:
    """A simulated worker for `shape`: the cost model's time as each config's, `faults` JSON {config or "*": fault};
    `per_bucket`: each batch size compiles its own kernels (screen_simulate.py)."""
    args = dict(experts=shape.experts, inter=shape.inter, hidden=shape.hidden, topk=shape.topk, gpu=SIMULATED_GPU)
    options = {"landscape": f"{landscape_us.__module__}:landscape_us", "landscape_args": args,
               "compile_s": compile_s, "call_s": call_s, "faults": json.loads(faults), "per_bucket": per_bucket}
    return WorkerSettings(target=SIMULATE, options=options, beat_s=0.2)


def add_simulate_args(p: argparse.ArgumentParser, compile_s: float, call_s: float) -> None:
    """--simulate and the simulated GPU's knobs (a config's compile and call seconds, its faults)."""
    p.add_argument("--simulate", action="store_true", help="simulated GPUs: the cost model's times (CPU)")
    p.add_argument("--sim-compile-s", type=float, default=compile_s)
    p.add_argument("--sim-call-s", type=float, default=call_s)
    p.add_argument("--sim-faults", default="{}", help='simulated faults, JSON {config or "*": fault}')
