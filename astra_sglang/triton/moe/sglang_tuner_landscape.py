"""What SGLang's tuner measured for every config its loop started (TunerBatch.landscape and .failed), read two ways.

- Places: where given configs (SGLang's shipped pick, ours) rank among the configs its loop timed, each as its
  time over the loop's best, and how flat the top is: configs within 1% and 3% of the best. Its loop times a
  config by 10 replays of a 10-call CUDA graph after one L2 flush, so where many configs sit within 1%, its pick
  among them is that timing's noise.
- Shared memory: our model (space.MoeConfig.smem_bytes, as space.fits reads it) against the compiler's verdicts.
  Configs the model keeps that Triton refused for shared memory cost a compile each for nothing; configs the model
  drops that ran are good configs pruned away. Triton's refusal names the bytes it needed ("out of resource: shared
  memory, Required: 327680, Hardware limit: 232448. ..."), so the model's byte count is checked against it too.
"""
from __future__ import annotations

import re

from pydantic import BaseModel

from astra_sglang.triton.moe.sglang_tuner_records import TunerBatch
from astra_sglang.triton.moe.space import SMEM_BYTES, MoeConfig, hopper

OUT_OF_SMEM = re.compile(r"out of resource: shared memory, Required: (\d+), Hardware limit: (\d+)")
"""Triton's OutOfResources message for shared memory (triton.runtime.errors, 3.x)."""


class Place(BaseModel):
    """One config among those the loop timed."""

    code: str
    rank: int | None = None
    """1 + the configs timed faster (1: the loop's best); None where the loop did not time it."""
    ratio: float | None = None
    """Its time over the loop's best."""
    failed: str = ""
    """What its benchmark_config raised, where the loop skipped it."""


class Landscape(BaseModel):
    """One batch size's landscape, summed up."""

    timed: int
    best_us: float
    within_1: int
    """Configs timed within 1% of the best (the best included)."""
    within_3: int
    """Within 3%."""
    places: dict[str, Place]
    """Label ("pick", "ours") -> where its config lies."""


def place(batch: TunerBatch, code: str, best: float) -> Place:
    """Where `code` lies among the configs the loop timed (`best`: their fastest time)."""
    if code in batch.landscape:
        us = batch.landscape[code]
        return Place(code=code, rank=1 + sum(v < us for v in batch.landscape.values()), ratio=us / best)
    return Place(code=code, failed=batch.failed.get(code, ""))


def landscape_of(batch: TunerBatch, codes: dict[str, str]) -> Landscape | None:
    """The landscape of `batch` with the places of `codes` (label -> config code); None where it timed nothing."""
    if not batch.landscape:
        return None
    times = batch.landscape.values()
    best = min(times)
    return Landscape(timed=len(times), best_us=best, within_1=sum(v <= best * 1.01 for v in times),
                     within_3=sum(v <= best * 1.03 for v in times),
                     places={label: place(batch, code, best) for label, code in codes.items()})


class SmemCheck(BaseModel):
    """Our shared-memory model against the compiler at one batch size."""

    limit: int
    """Bytes a block may use: Triton's 'Hardware limit' where a message names it, else an H100's or H200's."""
    wgmma: bool
    """Whether the model held every stage of 64-row tiles (a Hopper GPU)."""
    refused: int
    """Configs Triton refused for shared memory."""
    wasted: list[str]
    """Codes the model keeps that Triton refused for shared memory (a compile wasted each)."""
    pruned: list[str]
    """Codes the model drops that the loop timed (good configs pruned away)."""
    gap: float | None = None
    """The largest relative gap, model bytes / Triton's Required - 1, over the configs Triton refused."""
    gap_code: str = ""


def out_of_smem(reason: str) -> tuple[int, int] | None:
    """(Required, Hardware limit) of Triton's shared-memory refusal; None for any other failure."""
    m = OUT_OF_SMEM.search(reason)
    return (int(m.group(1)), int(m.group(2))) if m else None


def smem_check(batch: TunerBatch, element: int = 2) -> SmemCheck | None:
    """Model against compiler over the configs of `batch` with a verdict: timed (it fit) or refused for shared
    memory (other failures, e.g. 'PassManager::run failed', say nothing of it). `element`: bytes an operand
    element takes (1: fp8_w8a8). None where the loop started nothing."""
    if not batch.landscape and not batch.failed:
        return None
    wgmma = hopper(batch.gpu)
    refused = {code: found for code, reason in batch.failed.items() if (found := out_of_smem(reason))}
    limit = max((lim for _, lim in refused.values()), default=SMEM_BYTES)

    def need(code: str) -> int:
        return MoeConfig.from_code(code).smem_bytes(element, wgmma=wgmma)

    gaps = {code: need(code) / required - 1 for code, (required, _) in refused.items()}
    gap_code = max(gaps, key=lambda c: abs(gaps[c]), default="")
    return SmemCheck(limit=limit, wgmma=wgmma, refused=len(refused),
                     wasted=sorted(c for c in refused if need(c) <= limit),
                     pruned=sorted(c for c in batch.landscape if need(c) > limit),
                     gap=gaps[gap_code] if gap_code else None, gap_code=gap_code)
