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

from astra_sglang.triton.attention.space import AttnConfig


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

    PLANS = 4096
    """Launch forms kept (grid x attention shape x SGLang's keywords that the choice reads); past it the store
    starts over. A form's choice is planned once: the patch's own Python per eager launch went from 6.2 to 2.4 us
    (CPU, stand-in kernel, 2026-11-25: benchmarks/launcher_overhead.py)."""

    def __init__(self, original, kernel: str, choose: Chooser, on_launch: Callable[[bool], None] | None = None):
        self.original, self.kernel, self.choose, self.on_launch = original, kernel, choose, on_launch
        self._plans: dict[tuple, tuple[tuple, dict] | None] = {}

    def _plan(self, grid, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        """(grid, keywords to set) where a config applies to this launch, else None; `choose` must be pure."""
        try:
            q, k = args[0], args[1]
            key = (grid, q.shape[1], k.shape[-2], q.shape[-1], q.dtype, kwargs.get("BLOCK_M"),
                   kwargs.get("BLOCK_DPE", 0), kwargs.get("kv_group_num"), kwargs.get("q_head_num"))
            hash(key)
        except (AttributeError, IndexError, TypeError):
            return None
        if key in self._plans:
            return self._plans[key]
        info = launch_info(self.kernel, grid, args, kwargs)
        config = self.choose(info) if info is not None else None
        plan = None
        if config is not None:
            new_grid, new_kwargs = configure(self.kernel, grid, kwargs, config)
            plan = (new_grid, {k: new_kwargs[k] for k in config.launch()})
        if len(self._plans) >= self.PLANS:
            self._plans.clear()
        self._plans[key] = plan
        return plan

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            plan = self._plan(grid, args, kwargs)
            if self.on_launch is not None:
                self.on_launch(plan is not None)
            if plan is None:
                return self.original[grid](*args, **kwargs)
            return self.original[plan[0]](*args, **{**kwargs, **plan[1]})
        return launch

    def __getattr__(self, name):  # the JITFunction's own attributes (fn, cache, ...) stay reachable
        if name in ("original", "_plans"):
            raise AttributeError(name)
        return getattr(self.original, name)


def fixed(config: AttnConfig) -> Chooser:
    return lambda info: config
