"""Which A/A licenses an A/B's claims.

Two designs measure A and B where something besides the patch can differ between them, and no interval of their
own rows can show that it does not: `paired` (both servers on one GPU at once, one start each: the first
H100 A/A there gave the second-started server -14% in every round) and `restarts` (one server at a time on one
GPU: the 2026-11-28 H200 A/A of the dense model spread its six starts from -18% to +16%, the host drifting between
them). Their A/Bs claim nothing unless `--aa` names an A/A of the same design that passed the A/A rule
(serving/design_stats.py). The crossover runs both arms at once on their own GPUs and swaps them every period, so
drift and the GPU cancel inside each period; it needs no such licence.
"""
from __future__ import annotations

from pathlib import Path

from astra_sglang.serving import design_stats, runner, window

NEEDS_AA = ("paired", "restarts")
"""The designs whose claims need a passing A/A of their own."""


def licensed_by(aa_dir: Path | None, design: str, min_window_s: float = window.MIN_WINDOW_S) -> bool:
    """Whether `aa_dir` holds an A/A of `design` whose rounds pass the A/A rule (the paired design's without the
    start variance, which one start per arm cannot show), none shorter than `min_window_s`."""
    rows = runner.read_jsonl(Path(aa_dir) / runner.ROWS) if aa_dir is not None else []
    if design_stats.design_of(rows) != design or not rows or not all(r.get("control") for r in rows):
        return False
    change = design_stats.change(rows, "output_throughput", "output throughput", "tok/s", True)
    short = window.short_reason(window.windows(rows), min_window_s)
    return design_stats.aa_check(change, require_controlled=design != "paired", short_windows=short).ok
