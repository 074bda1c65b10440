"""The timed window of each benchmark round: how long SGLang's serving benchmark timed (its `duration`, kept in
every row's metrics in ab.jsonl), how much of it the first tokens took, and whether it is long enough to measure
a server rather than the round's own ramp-up and tail.

A round's fixed costs do not shrink with its length: the ramp-up (the first batch waits for its prefills; the
mean TTFT measures it) and the tail (the last requests finish in a shrinking batch) cost about one request's
latency each, whatever the prompt count. In a round of about a second they are the round.
"""
from __future__ import annotations

from dataclasses import dataclass

MIN_WINDOW_S = 10.0
"""The shortest timed window a round may have. Measured on 4x NVIDIA H200 (2026-11-27, commit 45b7284, the crossover
A/A of benchmarks/gpu/ab_design.sh with 64 prompts x 128 out at 32 concurrent): windows of 0.51-1.13 s, mean TTFT
47-222 ms (up to 20% of the window), a request's p99 latency 0.25-0.80 s, and the same server's output throughput
8.0k -> 11.0k -> 16.0k tok/s over three rounds. Those fixed costs, about 1 s together at most, are under 10% of a
10 s window; the GPU scripts aim at 15 s or more."""


@dataclass(frozen=True)
class RoundWindow:
    """One arm's timed round."""
    period: int | None
    """The design's period (crossover, restarts); None in the paired design."""
    round: int
    arm: str
    window_s: float | None
    """The benchmark's timed duration (None: the row has none)."""
    ttft_ms: float | None
    e2e_ms: float | None = None
    """The mean request latency (first token and decode)."""

    @property
    def ttft_share(self) -> float | None:
        """Mean TTFT as a fraction of the window: the round's ramp-up, which a short window cannot hide."""
        if not self.window_s or self.ttft_ms is None:
            return None
        return self.ttft_ms / 1000.0 / self.window_s

    @property
    def request_share(self) -> float | None:
        """Mean TTFT as a fraction of the mean request latency: what the first token (the prefill, queueing
        for it) takes of each request. One request at a time, the window holds every request's first token, so
        this, not ttft_share, is the prefill's part of the throughput."""
        if not self.e2e_ms or self.ttft_ms is None:
            return None
        return self.ttft_ms / self.e2e_ms

    def short(self, min_window_s: float) -> bool:
        return self.window_s is not None and self.window_s < min_window_s


def windows(rows: list[dict]) -> list[RoundWindow]:
    """Every timed row's window, in the rows' order (design rows: period and round; paired rows: run)."""
    out = []
    for row in rows:
        metrics = row.get("metrics", {})
        out.append(RoundWindow(period=row.get("period"), round=row.get("round", row.get("run", 0)),
                               arm=row.get("arm", "?"), window_s=metrics.get("duration"),
                               ttft_ms=metrics.get("mean_ttft_ms"), e2e_ms=metrics.get("mean_e2e_latency_ms")))
    return out


def _span(values: list[float]) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:.1f} s" if f"{lo:.1f}" == f"{hi:.1f}" else f"{lo:.1f}-{hi:.1f} s"


def short_reason(found: list[RoundWindow], min_window_s: float = MIN_WINDOW_S) -> str:
    """One line naming the rounds below `min_window_s` ('' when none is): the report's flag and the A/A rule's
    reason, e.g. 'rounds of 0.5-1.1 s: below the 10 s window; ramp-up and tail dominate'."""
    short = [w.window_s for w in found if w.short(min_window_s)]
    if not short:
        return ""
    which = "rounds" if len(short) == len(found) else f"{len(short)} of {len(found)} rounds"
    return f"{which} of {_span(short)}: below the {min_window_s:g} s window; ramp-up and tail dominate"


def describe(w: RoundWindow, min_window_s: float = MIN_WINDOW_S) -> str:
    """The console's words for one round's window, e.g. 'timed 1.02 s, TTFT 18% of it (41% of a request), below
    the 10 s window'."""
    if w.window_s is None:
        return "no timed window in the benchmark's output"
    share = f", TTFT {100 * w.ttft_share:.0f}% of it" if w.ttft_share is not None else ""
    if w.ttft_share is not None and w.request_share is not None:
        share += f" ({100 * w.request_share:.0f}% of a request)"
    return f"timed {w.window_s:.2f} s{share}" + (f", below the {min_window_s:g} s window"
                                                  if w.short(min_window_s) else "")
