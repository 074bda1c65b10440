"""What a kernel finds in its output buffers before a call: the same kinds in the checks and before every timed
launch, drawn at random, so that the contents of its own buffers cannot tell a kernel which one it is in.

  nan     the NaN poison (draw.NAN_BITS: a payload no arithmetic writes; integers a sentinel)
  stale   results of an earlier call: the buffers as the previous call on them left them, or another
          call's outputs copied in
  finite  random finite values

A kernel that skips work when its outputs already hold something (the previous replay's results, which a
timed graph used to hand it, while the checks always handed it NaN) now skips in the checks too, and leaves
what was there: `compare` names that "left unwritten".
"""
from __future__ import annotations

import random
from typing import Literal, Sequence

import torch

from astra_sglang.harness import draw
from astra_sglang.specs.records import KernelSpec

Kind = Literal["nan", "stale", "finite"]
KINDS: tuple[Kind, ...] = ("nan", "stale", "finite")
HELD = {"nan": "the NaN poison", "stale": "an earlier call's results", "finite": "the random values put there"}
"""What an unwritten element still holds, for a reason's wording."""


def schedule(rng: random.Random, count: int, first: Sequence[Kind] = KINDS) -> list[Kind]:
    """`count` kinds in random order, each of KINDS at least once where `count` allows; the first one drawn from
    `first` (a trial with nothing before it has no earlier results to hold)."""
    kinds = list(KINDS) * (count // len(KINDS) + 1)
    rng.shuffle(kinds)
    kinds = kinds[:count]
    if kinds and kinds[0] not in first:
        swap = next((i for i, k in enumerate(kinds) if k in first), None)
        if swap is None:
            kinds[0] = rng.choice(list(first))
        else:
            kinds[0], kinds[swap] = kinds[swap], kinds[0]
    return kinds


def finite_values(t: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Random finite values of `t`'s dtype and shape (integers: small non-negative ones, as indices are)."""
    if t.dtype == torch.bool:
        return torch.rand(t.shape, generator=gen, device=t.device) < 0.5
    if not draw.is_float(t.dtype):
        return torch.randint(0, 64, t.shape, generator=gen, device=t.device).to(t.dtype)
    return (torch.randn(t.shape, generator=gen, device=t.device) * 3.0).to(t.dtype)


def prepare(spec: KernelSpec, tensors: list[torch.Tensor], kind: Kind, gen: torch.Generator,
            stale: list[torch.Tensor] | None = None) -> None:
    """Put `kind` into every output of one call (`tensors` in spec order; a [rows, ...] view of several sets
    works the same). "stale" copies `stale`'s outputs in where given, else leaves the outputs as they are."""
    for i, arg in enumerate(spec.tensor_args):
        if arg.role != "out":
            continue
        t = tensors[i]
        if kind == "nan":
            draw.poison(t)
        elif kind == "finite":
            t.copy_(finite_values(t, gen))
        elif stale is not None:
            t.copy_(stale[i])


def snapshot(spec: KernelSpec, tensors: list[torch.Tensor]) -> list[torch.Tensor | None]:
    """Copies of what every output and in-place argument holds before a call (None for input-only ones): an
    element still equal to it afterwards and wrong was left unwritten."""
    return [t.clone() if a.role != "in" else None for a, t in zip(spec.tensor_args, tensors)]
