"""The A/B designs `ab` runs: which arm's server starts on which GPU in each period, and how many rounds each
period benchmarks. Pure: the runner (serving/runner.py) executes a schedule, serving/design_stats.py reads its
rows.

- crossover (two GPUs): each period restarts both servers at once, A on one GPU and B on the other, swapped every
  period (A on GPU 0 in odd periods). Every timed round benchmarks A and B at the same time, so drift over the
  run hits both; the GPU swap cancels a difference between the GPUs; the fresh starts each period put the
  start-to-start variance inside the interval, whose unit is the period. Why restarts rather than four servers
  kept up (A and B on each GPU, never two loaded at once): two servers sharing a GPU is the very setting whose
  A/A gave the second-started server -14% (H100, 2026-11-25), and four starts give two per arm, too few to
  estimate the start variance at all. One period costs one start (both GPUs start in parallel).
- restarts (one GPU): one server at a time, started in the order A B B A A B B A ..., so a linear drift over the
  run cancels every four starts; the unit is the start.
- paired (one GPU, kept for comparison): both servers up at once, one start each, rounds AB BA AB ...; its
  rounds share their starts' offsets, so its interval excludes start variance and makes no claim unless an A/A
  of the same design shows the two starts equal.
Every start is followed by one untimed warm-up round with the timed rounds' client settings (JIT compiles, prefill
shapes, CUDA-graph and allocator pools) before the timed rounds.
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from astra_sglang.errors import AstraError

Design = Literal["crossover", "restarts", "paired"]
DESIGNS: tuple[str, ...] = ("crossover", "restarts", "paired")
MIN_STARTS_PER_ARM = 3
"""restarts: fewer starts per arm cannot estimate the start variance the interval needs."""


class Slot(BaseModel):
    """One server start of a period."""
    arm: Literal["A", "B"]
    gpu: int
    """Index into the run's GPU list (crossover: 0 or 1; one-GPU designs: 0)."""


class Period(BaseModel):
    """Servers started together, warmed up by one untimed full round, benchmarked for `rounds` timed rounds (all of
    the period's servers at once in each round), probed for parity, stopped."""
    index: int
    slots: list[Slot]
    rounds: int = Field(ge=0)
    """0: no benchmark at all (a parity-only period)."""

    def slot(self, arm: str) -> Slot | None:
        return next((s for s in self.slots if s.arm == arm), None)


def crossover(periods: int, rounds: int) -> list[Period]:
    """Period p: A on GPU 0 and B on GPU 1 when p is odd, swapped when even."""
    return [Period(index=p, rounds=rounds, slots=[Slot(arm="A", gpu=(p - 1) % 2), Slot(arm="B", gpu=p % 2)])
            for p in range(1, periods + 1)]


def restart_order(starts: int) -> list[str]:
    """A B B A A B B A ...: `starts` starts in all."""
    return [("A", "B", "B", "A")[i % 4] for i in range(starts)]


def restarts(starts_per_arm: int, rounds: int) -> list[Period]:
    """2 x starts_per_arm periods of one start each, in restart_order."""
    if starts_per_arm < MIN_STARTS_PER_ARM:
        raise AstraError(f"the restarts design needs at least {MIN_STARTS_PER_ARM} starts per arm (--runs), got "
                         f"{starts_per_arm}: the interval's unit is the start")
    return [Period(index=i + 1, rounds=rounds, slots=[Slot(arm=arm, gpu=0)])
            for i, arm in enumerate(restart_order(2 * starts_per_arm))]


def schedule(design: str, runs: int, rounds: int, gpus: list[str]) -> list[Period]:
    """The periods of `design`: crossover needs two GPUs, restarts one (the first given or the visible one)."""
    if design == "crossover":
        if len(gpus) != 2:
            raise AstraError(f"the crossover design needs two GPUs (--gpus 0,1), got {len(gpus) or 'none'}")
        return crossover(runs, rounds)
    if design == "restarts":
        if len(gpus) > 1:
            raise AstraError("the restarts design runs on one GPU: give one --gpus index")
        return restarts(runs, rounds)
    raise AstraError(f"no schedule for design {design!r} (the paired design runs serving/paired.py)")


def gpu_of(slot: Slot, gpus: list[str]) -> str | None:
    """The CUDA_VISIBLE_DEVICES value of a slot's server (None: leave the environment's)."""
    return gpus[slot.gpu] if gpus else None
