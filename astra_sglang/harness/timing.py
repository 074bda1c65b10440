"""Kernel-only timing by CUDA-graph replay, one argument set per launch; ceilings measured in the same process.

- Argument sets: a replay's launches each read their own (plan_sets); the L2 is emptied before every replay
  (timed_run.py); every launch having its own set also lets harness/timed.py check each timed launch's work.
- Interleaved: candidate and baseline graphs replay alternately (order flipped each round), so clock
  and thermal drift hit both; the speedup is the median of per-round ratios.
- Ceilings: an SM copy kernel (bytes read + written) and an empty kernel, in graphs, same run.
- Eager: per call with Python dispatch (no graph), host-timed (timed_run.py): reported separately and labelled.
"""
from __future__ import annotations

import ctypes
import random
import statistics
import time
from typing import Callable

import torch

from astra_sglang.harness.records import Timing

LaunchFn = Callable[[int], int]  # launch on the current stream using input set i; returns the ABI code
MIN_REPLAY_US = 300.0  # one replay lasts at least this long, so event resolution (~0.5 us) is noise
MAX_LAUNCHES = 2000
# Unrecorded replays first, by time: right after the checks, rmsnorm 16384x8192 (104% of the copy probe)
# timed 146 us over 3 warm-up + 20 recorded replays (~25 ms), but 131 us over 200 replays and 131 us when
# nothing ran before it; SGLang's kernel (70% of the probe) moved ~1%: a transient of under ~100 ms that
# slows a kernel at the DRAM limit (H200, 2026-11-21). 0.2 s covers it; Triton's do_bench warms up for 25 ms.
WARMUP_S = 0.2
MATMUL_N = 8192
"""The matmul rate probe's size: 1.1 TFLOP a launch, large enough for cuBLAS's fastest tiles on an H100/H200."""


def plan_sets(per_set: int, floor_us: float, budget: int, rng: random.Random) -> int:
    """How many argument sets (= launches of the timed graph, each its own set): enough that a replay lasts
    MIN_REPLAY_US even at the floor time (`floor_us`: no kernel is faster, so a real one's replays last longer);
    at most MAX_LAUNCHES; then up to an eighth more, drawn at random, so that a kernel cannot know the count
    ahead; at most what the memory `budget` holds with one set to spare (the second graph launches one more).
    L2 cold needs no more sets than that: every replay comes after a read of twice the L2 (timed_run.py), and
    every launch of it reads its own set once."""
    want = int(min(-(-MIN_REPLAY_US // max(floor_us, 0.05)), MAX_LAUNCHES))
    want += rng.randrange(want // 8 + 1)
    return int(max(1, min(want, budget // max(per_set, 1) - 1)))


def capture(fn: LaunchFn, order: list[int]) -> torch.cuda.CUDAGraph:
    """A CUDA graph of fn(i) for every i in `order`, captured on the current stream: the stream the checks and
    the eager calls use too (a kernel must not tell them apart by its stream), unless that is the default
    stream, which cannot capture."""
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.current_stream()
    if stream == torch.cuda.default_stream():
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn(order[0])  # warm-up outside capture (module load, lazy init)
        stream.synchronize()
        with torch.cuda.graph(graph, stream=stream):
            for i in order:
                code = fn(i)
                if code != 0:
                    raise RuntimeError(f"launch during graph capture returned {code}")
    torch.cuda.synchronize()
    return graph


def replay_us(graph: torch.cuda.CUDAGraph) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1000.0


def launch_count(probe_replays_us: list[float], sets: int) -> int:
    """Launches per graph from replays of a `sets`-launch probe graph: every set at least once and
    >= MIN_REPLAY_US per replay. The fastest probe replay, not the last: with the last one, two evaluations
    on an H200 (2026-11-21) read the empty kernel at 1.0-2.0 us against 0.60-0.64 us in all others (which
    flatters "x empty kernel"). The likely cause: one slow replay of the 1-launch probe (tens of us) left the graph a
    handful of launches, whose per-launch time then carries the graph's own launch overhead."""
    per_launch = max(min(probe_replays_us) / sets, 0.5)
    return int(min(MAX_LAUNCHES, max(sets, -(-MIN_REPLAY_US // per_launch))))


def launches_for(fn: LaunchFn, sets: int, probes: int = 5) -> int:
    probe = capture(fn, list(range(sets)))
    for _ in range(2):
        replay_us(probe)
    return launch_count([replay_us(probe) for _ in range(probes)], sets)


def blame(who: str, step):
    """Run `step`, naming `who` in a RuntimeError it raises. A CUDA fault surfaces at the first sync after the
    faulting launch, so a step that ends in a sync and follows a clean one is that side's. An error already
    named keeps its name."""
    try:
        return step()
    except RuntimeError as exc:
        text = str(exc).strip()
        if text.startswith("in the "):
            raise
        raise RuntimeError(f"in the {who}: {text.splitlines()[0] if text else type(exc).__name__}") from exc


def interleaved(fns: dict[str, LaunchFn], sets: int, replays: int = 20, warmup: int = 3,
                warmup_s: float = WARMUP_S) -> dict[str, list[float]]:
    """Per-launch microseconds of each fn, one sample per replay, replays interleaved across fns, after at
    least `warmup` rounds and `warmup_s` seconds of unrecorded ones. Launches cycle over `sets` argument sets
    (the ceilings' probes; candidates are timed through `time_graphs`, one set per launch).

    Every capture and replay ends in a sync, so a fault is raised naming the fn whose launches made it
    (e.g. "in the baseline: ..."): an original op that faults only here is not blamed on the candidate."""
    launches = max(blame(name, lambda: launches_for(fn, sets)) for name, fn in fns.items())
    order = [i % sets for i in range(launches)]
    graphs = {name: blame(name, lambda: capture(fn, order)) for name, fn in fns.items()}
    return time_graphs(graphs, launches, replays, warmup, warmup_s)


def time_graphs(graphs: dict[str, torch.cuda.CUDAGraph], launches: int, replays: int = 20, warmup: int = 3,
                warmup_s: float = WARMUP_S) -> dict[str, list[float]]:
    """Per-launch microseconds of each captured graph of `launches` launches, replays interleaved."""
    return rounds({name: (lambda _r, g=g: replay_us(g) / launches) for name, g in graphs.items()}, replays, warmup,
                  warmup_s)


def rounds(replay: dict[str, Callable[[int], float]], replays: int, warmup: int, warmup_s: float,
           clock: Callable[[], float] = time.perf_counter) -> dict[str, list[float]]:
    """One sample per fn per round (each fn is handed the round's number), the order flipped every round;
    rounds are recorded once at least `warmup` of them and `warmup_s` seconds have passed, until each fn has
    `replays` samples."""
    order = list(replay)
    samples: dict[str, list[float]] = {name: [] for name in order}
    start, r = clock(), 0
    while len(samples[order[0]]) < replays:
        recorded = r >= warmup and clock() - start >= warmup_s
        for name in (order if r % 2 == 0 else order[::-1]):
            us = blame(name, lambda: replay[name](r))
            if recorded:
                samples[name].append(us)
        r += 1
    return samples


def summarize(samples: list[float]) -> Timing:
    q = statistics.quantiles(samples, n=10) if len(samples) >= 2 else [samples[0]] * 9
    return Timing(median_us=statistics.median(samples), p10_us=q[0], p90_us=q[-1])


def ratio_median(baseline: list[float], candidate: list[float]) -> float:
    return statistics.median(b / c for b, c in zip(baseline, candidate))


class Ceilings:
    """The device-copy roofline (GB/s, read + written) and the empty-kernel floor (us, the cheaper of a plain
    and a PDL launch in a graph), measured here; for ops with FLOPs, a dense matmul rate (`measure_matmul`)."""

    def __init__(self, probes_library: str):
        lib = ctypes.CDLL(probes_library)
        self._copy = lib.astra_probe_copy
        self._copy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_void_p]
        empties = {"empty": lib.astra_probe_empty, "empty_pdl": lib.astra_probe_empty_pdl}
        for fn in empties.values():
            fn.argtypes = [ctypes.c_void_p]
        self.roofline_gbps = self._measure_copy()
        samples = interleaved({name: (lambda i, f=f: f(self._stream())) for name, f in empties.items()}, 1)
        # The cheaper of a plain and a PDL launch: no kernel's launch costs less (see probes.cu).
        self.empty_us = min(statistics.median(v) for v in samples.values())

    @staticmethod
    def _stream() -> int:
        return torch.cuda.current_stream().cuda_stream

    def _measure_copy(self, nbytes: int = 1 << 30) -> float:
        src = torch.empty(nbytes, dtype=torch.uint8, device="cuda").random_(0, 255)
        dst = torch.empty_like(src)
        sms = torch.cuda.get_device_properties(src.device).multi_processor_count

        def copy(_: int) -> int:
            return self._copy(dst.data_ptr(), src.data_ptr(), nbytes, sms, self._stream())

        us = statistics.median(interleaved({"copy": copy}, 1, replays=10)["copy"])
        return 2 * nbytes / us / 1e3

    @staticmethod
    def measure_matmul(n: int = MATMUL_N, dtype: torch.dtype = torch.bfloat16) -> float:
        """TFLOP/s of torch's (cuBLAS) n x n x n matmul in `dtype`, graph-replayed: the compute ceiling a
        compute-bound kernel's time is held to, as the copy roofline holds a memory-bound one."""
        a, b = (torch.randn(n, n, device="cuda").to(dtype) for _ in range(2))
        c = torch.empty(n, n, device="cuda", dtype=dtype)

        def mm(_: int) -> int:
            torch.mm(a, b, out=c)
            return 0

        us = statistics.median(interleaved({"matmul": mm}, 1, replays=10)["matmul"])
        return 2 * n ** 3 / us / 1e6
