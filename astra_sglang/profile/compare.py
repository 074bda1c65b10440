"""The kernel-level in-place A/B: two profiles of the same load (unpatched, patched), per phase and op.

Kernel time per step is far less noisy than a server's throughput (15-30% apart between identical server
starts), so a patched op's gain shows here even where a serving A/B cannot resolve it; the step's wall time
beside the GPU time shows the host's share. The two runs' batches differ (how many tokens a prefill step
packs depends on arrival times), so the second run's kernel times are scaled to the first run's tokens per
step: exact for kernels whose time is linear in tokens (the element-wise and norm ops), approximate for
the rest (GEMMs, attention), whose rows are there for orientation.
"""
from __future__ import annotations

from collections import defaultdict

from pydantic import BaseModel

from astra_sglang.profile.records import Phase, Profile

SAME_BATCH = 1.25
"""Tokens per step within this factor of each other: the two runs' batches are alike enough for scaling to be
close for every kernel. Beyond it only the token-linear kernels compare: an unpatched decode profile that caught
steps of 1 request against a patched one of 64 (H100, 2026-11-25) made attention read 56 vs 359 us a step."""


class OpDelta(BaseModel):
    phase: str
    op: str
    kind: str
    before_us: float
    """Kernel time of the op per step in the first profile."""
    after_us: float
    before_kernels: list[str]
    after_kernels: list[str]

    @property
    def change_pct(self) -> float:
        return 100.0 * (self.after_us - self.before_us) / self.before_us if self.before_us else 0.0


class PhaseDelta(BaseModel):
    phase: str
    tokens_before: float
    tokens_after: float
    """Tokens per step of each run: a load's batches differ from run to run (above all in prefill), so the
    second run's kernel times are scaled to the first run's tokens per step (`scale`)."""
    scale: float
    gpu_before_us: float
    gpu_after_us: float
    """Scaled, like every `after_us` of `ops`."""
    wall_before_us: float
    wall_after_us: float
    """Not scaled: the host's time per step does not grow with tokens. Means (records.Phase.step_wall_us)."""
    wall_median_before_us: float = 0.0
    wall_median_after_us: float = 0.0
    """Medians: a host cost of the patches shows in them; one slow step (a compile) shows in the mean alone."""

    @property
    def same_batch(self) -> bool:
        """Whether the runs' batches are alike (SAME_BATCH): else only token-linear kernels compare."""
        low, high = sorted((self.tokens_before, self.tokens_after))
        return low > 0 and high / low <= SAME_BATCH
    ops: list[OpDelta]


def _by_op(phase: Phase) -> dict[tuple[str, str], tuple[float, list[str]]]:
    out: dict[tuple[str, str], list] = defaultdict(lambda: [0.0, []])
    for row in phase.rows:
        key = (row.op or row.name, row.kind)
        out[key][0] += row.per_step_us
        out[key][1].append(row.name)
    return {k: (v[0], v[1]) for k, v in out.items()}


def compare(before: Profile, after: Profile, top: int = 12) -> list[PhaseDelta]:
    """Per phase both have: GPU and wall time per step, and per op (every spec op, then the largest others)."""
    deltas = []
    for phase in after.phases:
        base = before.phase(phase.name)
        if base is None:
            continue
        scale = base.tokens_per_step / phase.tokens_per_step if base.tokens_per_step and phase.tokens_per_step else 1.0
        old = _by_op(base)
        new = {k: (us * scale, names) for k, (us, names) in _by_op(phase).items()}
        keys = sorted(set(old) | set(new), key=lambda k: -(old.get(k, (0.0,))[0] + new.get(k, (0.0,))[0]))
        chosen = [k for k in keys if k[1] == "spec"] + [k for k in keys if k[1] != "spec"][:top]
        ops = [OpDelta(phase=phase.name, op=op, kind=kind, before_us=old.get((op, kind), (0.0, []))[0],
                       after_us=new.get((op, kind), (0.0, []))[0], before_kernels=old.get((op, kind), (0.0, []))[1],
                       after_kernels=new.get((op, kind), (0.0, []))[1]) for op, kind in chosen]
        deltas.append(PhaseDelta(phase=phase.name, tokens_before=base.tokens_per_step, tokens_after=phase.tokens_per_step,
                                 scale=scale, gpu_before_us=base.gpu_us_per_step,
                                 gpu_after_us=phase.gpu_us_per_step * scale, wall_before_us=base.step_wall_us,
                                 wall_after_us=phase.step_wall_us, wall_median_before_us=base.step_wall_median_us,
                                 wall_median_after_us=phase.step_wall_median_us, ops=ops))
    return deltas
