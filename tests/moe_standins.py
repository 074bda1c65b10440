"""Stand-ins for SGLang's fused MoE launch on CPU (its module imports CUDA-only code): a function with the installed
invoke_fused_moe_kernel's signature, read from its source, that records its calls; a Triton kernel stand-in that
records its launches."""
from __future__ import annotations

import ast
import inspect


class Recorder:
    """A Triton kernel stand-in: records (grid, keywords) of every launch."""

    def __init__(self):
        self.launches = []

    def __getitem__(self, grid):
        return lambda **kwargs: self.launches.append((grid, kwargs))


def sglang_launcher():
    """A function with SGLang's launcher signature (read from the installed source) that records its calls in
    `.calls`."""
    from astra_sglang.triton.moe import sources, splitk

    text = sources.installed_kernel_file().read_text()
    fn = next(n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == splitk.LAUNCHER)
    required = len(fn.args.args) - len(fn.args.defaults)
    calls = []

    def invoke_fused_moe_kernel(*args, **kwargs):
        calls.append((args, kwargs))

    invoke_fused_moe_kernel.__signature__ = inspect.Signature([
        inspect.Parameter(a.arg, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                          default=inspect.Parameter.empty if i < required else False)
        for i, a in enumerate(fn.args.args)])
    invoke_fused_moe_kernel.calls = calls
    return invoke_fused_moe_kernel


def timed_row(shape, speedup: float, baseline_us: float = 100.0, dtype: str = "bfloat16"):
    """An evaluator's row for `shape`: checked correct, the candidate `speedup` times faster than the baseline."""
    from astra_sglang.harness.records import ShapeResult, Timing

    us = baseline_us / speedup
    return ShapeResult(shape=shape, dtype=dtype, correct=True, speedup=speedup,
                       candidate=Timing(median_us=us, p10_us=us, p90_us=us),
                       baseline=Timing(median_us=baseline_us, p10_us=baseline_us, p90_us=baseline_us))
