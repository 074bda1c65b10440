"""Kernel time of one op call by CUDA-graph replay, as SGLang's fused MoE tuner times a config.

`launches` calls are captured into one graph; after `warmup` replays, L2 is flushed once (a 256 MB write, as
SGLang's tuner does) and each of `replays` replays is timed with CUDA events, `before(i)` running first outside
the timed region (SGLang's tuner draws new routing there: every replay reads other experts' weights, so L2
cannot hold them across replays). The time of one call is the median replay over `launches`. With a cutoff, the
first timed replay is read at once and a config slower than the cutoff stops there (`Timed.cut`): screening
keeps only the fast end. Host time is not in it: a replay launches the whole graph at once.

How many calls a graph holds is set per bucket (`fit`): `launches` (10, as SGLang's tuner) for calls up to
REPLAY_US / 10, fewer for longer calls so that a replay lasts about REPLAY_US, one call from REPLAY_US on. CUDA
events time a replay of a few milliseconds to well under 1%; ten calls of 7 ms would spend 0.8 s of GPU a config.
"""
from __future__ import annotations

import math
import statistics
from typing import Callable

from astra_sglang.optimize.tuner.screen_launch import Timed

FLUSH_BYTES = 256 * 10**6
REPLAY_US = 3000.0
"""The length a timed replay is fitted to (10 calls of 300 us: fused MoE near batch 64 on an H200)."""


def fitted_launches(call_us: float, most: int = 10, replay_us: float = REPLAY_US) -> int:
    """Calls per graph so that a replay lasts about `replay_us`: between 1 and `most`."""
    if call_us <= 0:
        return most
    return max(1, min(most, math.ceil(replay_us / call_us)))


class GraphTimer:
    def __init__(self, launches: int = 10, replays: int = 10, warmup: int = 2):
        import torch

        self.most = self.launches = launches
        self.replays, self.warmup = replays, warmup
        self.pool = torch.cuda.graph_pool_handle()
        self.flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
        self.starts = [torch.cuda.Event(enable_timing=True) for _ in range(replays)]
        self.ends = [torch.cuda.Event(enable_timing=True) for _ in range(replays)]

    def fit(self, call_us: float) -> int:
        """Set the calls per graph for calls of about `call_us` (see the module docstring); returns them."""
        self.launches = fitted_launches(call_us, self.most)
        return self.launches

    def time(self, call: Callable[[], None], before: Callable[[int], None] | None = None,
             cutoff_us: float | None = None) -> Timed:
        import torch

        before = before or (lambda i: None)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            for _ in range(self.launches):
                call()
        try:
            for i in range(self.warmup):
                before(i)
                graph.replay()
            self.flush.zero_()
            times: list[float] = []
            for i in range(self.replays):
                before(i)
                self.starts[i].record()
                graph.replay()
                self.ends[i].record()
                if i == 0 and cutoff_us is not None:
                    self.ends[0].synchronize()
                    first = self.starts[0].elapsed_time(self.ends[0]) * 1000 / self.launches
                    if first > cutoff_us:
                        return Timed(us=first, spread=0.0, replays=1, cut=True)
            torch.cuda.synchronize()
            times = sorted(s.elapsed_time(e) * 1000 / self.launches for s, e in zip(self.starts, self.ends))
        finally:
            graph.reset()
        median = statistics.median(times)
        p10, p90 = times[len(times) // 10], times[-1 - len(times) // 10]
        return Timed(us=median, spread=(p90 - p10) / median if median else 0.0, replays=len(times))
