"""What a screening worker needs from an op: the `ScreenLaunch` protocol, and loading one by name.

A launch lives in the worker process for its whole life: it imports the op's code once, builds a bucket's inputs
and reference once (`prepare`), and then answers per config code: what it would compile (`jobs`, for compiling
ahead), whether its output is right (`check`, whose call also loads the config's kernels) and how long one call
takes (`time`). The worker handles everything else (isolation, heartbeat, counting). Fused MoE's launch is
`astra_sglang.optimize.tuner.moe_screen:MoeScreenLaunch`; `screen_simulate.SimulatedLaunch` stands in for a GPU.

A config that must not be timed raises `ScreenFailure(stage, reason)`; an exception after which the device is
unusable (a CUDA illegal address poisons the context) is `fatal`: the worker answers and exits, and a new one
takes over.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Protocol

from astra_sglang.errors import AstraError
from astra_sglang.triton.screen_records import Bucket, CompileJob


@dataclass(frozen=True)
class Checked:
    error: float
    """Worst |out - ref| / (atol + rtol |ref|): <= 1 passes."""
    detail: str = ""


@dataclass(frozen=True)
class Timed:
    us: float
    """Median time of one call."""
    spread: float
    """(p90 - p10) / median over the timed replays."""
    replays: int
    cut: bool = False
    """Stopped after its first replay: slower than the cutoff."""


class ScreenFailure(Exception):
    def __init__(self, stage: str, reason: str):
        super().__init__(reason)
        self.stage, self.reason = stage, reason


class Counter(Protocol):
    """A context manager counting, while active, the compiles that found the cache (hits) and those that ran."""

    hits: int
    misses: int

    def __enter__(self): ...

    def __exit__(self, *exc): ...


class ScreenLaunch(Protocol):
    def prepare(self, bucket: Bucket) -> None:
        """Build the bucket's inputs and reference output (once per bucket)."""

    def jobs(self, config: str) -> list[CompileJob]:
        """The compiles a first call of `config` would run (none where its kernels are loaded already)."""

    def check(self, config: str) -> Checked:
        """One call of `config` on the check inputs against the reference."""

    def time(self, config: str, cutoff_us: float | None) -> Timed:
        """Kernel time of one call; stop after the first replay where it is slower than `cutoff_us`."""

    def counter(self) -> Counter:
        """A fresh compile-hit counter."""

    def fatal(self, exc: BaseException) -> bool:
        """Whether the device is unusable after `exc` (the worker must be replaced)."""


def load_launch(target: str, options: dict) -> ScreenLaunch:
    """`module:factory` called with the options."""
    module_name, _, attr = target.partition(":")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise AstraError(f"no screening launch {target!r}: {exc}") from None
    return factory(**options)


def cuda_fatal(exc: BaseException) -> bool:
    """CUDA errors that poison the context (illegal address, misaligned access, launch failure, ECC)."""
    text = str(exc).lower()
    return type(exc).__name__ == "AcceleratorError" or any(s in text for s in (
        "illegal memory access", "illegal address", "misaligned address", "unspecified launch failure",
        "an illegal instruction", "uncorrectable ecc", "device-side assert"))
