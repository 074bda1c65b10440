"""A config applied at the launch of SGLang's Triton attention kernel: the seam both the evaluator op and the
live patch use.

SGLang's launchers (`_decode_grouped_att_m_fwd`, `extend_attention_fwd`) look their kernel up as a module
global at every call: `_fwd_grouped_kernel_stage1[grid](...)`, `_fwd_kernel[grid](...)`. A
`ConfiguredKernel` put in that global's place receives the launch, sets the config's block sizes and launch
options and the grid axis that depends on them, and launches SGLang's own kernel. SGLang's launcher code
stays SGLang's; nothing is copied. Under CUDA graphs the launch runs once, at capture, so the config is
chosen from what the launch knows then: the batch size (grid axis 0) for decode, the longest extend length
of the call (grid axis 2 times BLOCK_M) for extend; never a kv length (not fixed in a graph).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from astra_sglang.triton.attn_space import AttnConfig


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class LaunchInfo:
    """What the config choice sees of one launch."""

    kernel: str
    heads: int
    kv_heads: int
    head_dim: int
    dtype: str
    size: int
    """decode: the batch size; extend: the longest extend length (a multiple of SGLang's BLOCK_M)."""


def launch_info(kernel: str, grid, args: tuple, kwargs: dict) -> LaunchInfo | None:
    """From the launch's tensors and grid (None where the launch is not one this module understands)."""
    if not isinstance(grid, tuple) or len(grid) != 3 or len(args) < 2:
        return None
    q, k = args[0], args[1]
    try:
        heads, kv_heads, head_dim = int(q.shape[1]), int(k.shape[-2]), int(q.shape[-1])
        dtype = str(q.dtype).removeprefix("torch.")
    except (AttributeError, IndexError, TypeError):
        return None
    if kernel == "decode_attention":
        if kwargs.get("BLOCK_DPE", 0):  # MLA's split head dim: another shape than any tuned
            return None
        size = int(grid[0])
    else:
        size = int(grid[2]) * int(kwargs.get("BLOCK_M", 1))
    return LaunchInfo(kernel, heads, kv_heads, head_dim, dtype, size)


def configure(kernel: str, grid: tuple, kwargs: dict, config: AttnConfig) -> tuple[tuple, dict]:
    """The grid and keywords of the launch with `config` in place of SGLang's pick."""
    new = dict(kwargs, **config.launch())
    if kernel == "decode_attention":
        # The launcher's grid axis 1: cdiv(q heads, min(BLOCK_H, q heads per kv head)).
        rows = min(config.block_h, int(kwargs["kv_group_num"]))
        return (grid[0], _cdiv(int(kwargs["q_head_num"]), rows), grid[2]), new
    # Axis 2 covers the longest extend length in BLOCK_M rows; blocks past a request's end return at once.
    return (grid[0], grid[1], _cdiv(int(grid[2]) * int(kwargs["BLOCK_M"]), config.block_m)), new


Chooser = Callable[[LaunchInfo], AttnConfig | None]


class ConfiguredKernel:
    """SGLang's kernel object behind a config choice. `choose` returns None to keep SGLang's pick; `on_launch`
    (if given) is told of every launch and whether a config was applied."""

    def __init__(self, original, kernel: str, choose: Chooser, on_launch: Callable[[bool], None] | None = None):
        self.original, self.kernel, self.choose, self.on_launch = original, kernel, choose, on_launch

    def __getitem__(self, grid):
        launcher = self.original[grid]

        def launch(*args, **kwargs):
            info = launch_info(self.kernel, grid, args, kwargs)
            config = self.choose(info) if info is not None else None
            if self.on_launch is not None:
                self.on_launch(config is not None)
            if config is None:
                return launcher(*args, **kwargs)
            new_grid, new_kwargs = configure(self.kernel, grid, kwargs, config)
            return self.original[new_grid](*args, **new_kwargs)
        return launch

    def __getattr__(self, name):  # the JITFunction's own attributes (fn, cache, ...) stay reachable
        if name == "original":
            raise AttributeError(name)
        return getattr(self.original, name)


def fixed(config: AttnConfig) -> Chooser:
    return lambda info: config
