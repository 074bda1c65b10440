"""One shape's kernel timing: two graphs per side, prepared and interleaved replays, checked replays, eager calls.

- Two graphs per side, over the arena's sets in random orders: N launches and N + 1 (N itself drawn with a
  random part, harness/timing.plan_sets). A kernel that does the work of K launches in one (it cannot know
  where the capture ends) leaves the last launches of one of the two undone, whatever K > 1 is.
- Every replay, timed or not, of either side, comes after the same preparation (TimedSets.prepare, with a
  pre-state drawn at random) and, with L2 cold, a read of twice the L2 that leaves none of the sets in it.
- Rounds interleave candidate and baseline (timing.rounds); then one more round per graph, recorded like the
  others, in which the candidate's replay is checked as it left its sets, fingerprints first (timed.py).
- Eager: calls one after another from Python over a subset of the sets, host-timed per round of calls, the
  last round checked as it left them (a set called twice in a round only where the op has no in-place argument).
"""
from __future__ import annotations

import random
import time

import torch

from astra_sglang.harness.prestate import KINDS
from astra_sglang.harness.timed import TimedSets
from astra_sglang.harness.timing import LaunchFn, blame, capture, rounds

EAGER_CALLS = 300
EAGER_SETS = 64
"""Eager rounds call at most this many sets; the last round is checked as it left them (every set would cost a
reference computation per set for little: the graph's sets were checked already)."""
EAGER_ROUND = 32
"""Calls a round makes at least (cycling through its sets where it has fewer): calls from Python one after
another, as the eager figure means, not one call between synchronizations. Not for an op with in-place
arguments: its call on a set starts from what the set's last call left there, so a set called twice in a round
would hold two calls' work, which the check (one call on the prepared values) does not model; such an op calls
each set once a round, as each launch of a timed graph has its own set."""
CHECK_TAIL = 64
"""Of the N + 1 graph, the last launches checked: where a kernel batching up to this many launches into one
leaves work undone (the N graph is checked whole)."""
REPLAYS, WARMUP, WARMUP_S = 20, 3, 0.2
"""Recorded rounds, and the unrecorded ones first (rounds and seconds): see timing.WARMUP_S."""
CANDIDATE = "candidate"


_EVENT = torch.cuda.Event
_RECORD, _ELAPSED, _WAIT = _EVENT.record, _EVENT.elapsed_time, _EVENT.synchronize
_REPLAY, _CLOCK = torch.cuda.CUDAGraph.replay, time.perf_counter
"""Bound at import, before any Python candidate loads: a candidate patching them changes no figure
(harness/integrity.py reports the patch)."""


def timed_replay(graph, then=None) -> tuple[float, torch.Tensor | None]:
    """One replay's microseconds; `then()` is enqueued right behind it, before the host waits for it."""
    start, end = _EVENT(enable_timing=True), _EVENT(enable_timing=True)
    _RECORD(start)
    _REPLAY(graph)
    _RECORD(end)
    after = then() if then else None
    _WAIT(end)
    return _ELAPSED(start, end) * 1000.0, after


class TimedRun:
    """`capture` and `replay` default to CUDA graphs (timing.capture, timed_replay); CPU tests hand in stand-ins."""

    def __init__(self, sets: TimedSets, fns: dict[str, LaunchFn], rng: random.Random,
                 flush: torch.Tensor | None = None, capture=capture, replay=timed_replay):
        self.sets, self.fns, self.rng, self.flush = sets, fns, rng, flush
        self.capture, self.replay = capture, replay
        n = sets.count - 1
        self.orders = [rng.sample(range(n), n), rng.sample(range(n + 1), n + 1)]

    def prepare(self) -> None:
        self.sets.prepare(self.rng.choice(KINDS))
        if self.flush is not None:  # read twice the L2: the preparation's writes leave it
            self.flush.sum()

    def graphs(self, replays: int = REPLAYS, warmup: int = WARMUP,
               warmup_s: float = WARMUP_S) -> tuple[dict[str, list[float]], str]:
        """Per-launch microseconds of each side, one sample per replay, and '' or why the candidate's checked
        replays do not hold what they should."""
        graphs = {name: [blame(name, lambda o=o: self.capture(fn, o)) for o in self.orders]
                  for name, fn in self.fns.items()}

        def replay(name: str):
            def go(r: int) -> float:
                order = self.orders[r % 2]
                self.prepare()
                return self.replay(graphs[name][r % 2])[0] / len(order)
            return go

        samples = rounds({name: replay(name) for name in graphs}, replays, warmup, warmup_s)
        for g, order in enumerate(self.orders):  # recorded rounds like the others; the candidate's checked
            names = list(graphs) if g % 2 == 0 else list(graphs)[::-1]
            for name in names:
                self.prepare()
                us, early = blame(name, lambda: self.replay(
                    graphs[name][g], self.sets.fingerprints if name == CANDIDATE else None))
                samples[name].append(us / len(order))
                if name != CANDIDATE:
                    continue
                wrong = blame(CANDIDATE, lambda: self.sets.check_left(
                    order, "the timed graph", early, tail=CHECK_TAIL if g else None))
                if wrong:
                    return samples, wrong
        return samples, ""

    def eager(self, name: str, check: bool) -> tuple[float, str]:
        """Per call from Python (ctypes launch, no graph), host clock from the first call of a round to our
        stream's end of it; '' or why the last round's calls (checked when `check`) left the wrong thing."""
        subset = self.orders[0][:EAGER_SETS]
        inplace = any(a.role == "inplace" for a in self.sets.spec.tensor_args)
        calls = len(subset) if inplace else max(len(subset), EAGER_ROUND)
        order = [subset[j % len(subset)] for j in range(calls)]  # a round's calls
        fn = self.fns[name]
        for i in order[:10]:
            fn(i)
        seconds, calls, early = 0.0, 0, None
        # The last round stops after a random number of calls: a kernel deferring calls to do several at once
        # cannot know which call is the last one.
        count = -(-EAGER_CALLS // len(order))
        for r in range(count):
            batch = order if r < count - 1 else order[:self.rng.randint(1, len(order))]
            self.prepare()
            torch.cuda.synchronize()
            start = _CLOCK()
            for i in batch:
                fn(i)
            torch.cuda.current_stream().synchronize()  # ours only: work left elsewhere is not waited for
            seconds += _CLOCK() - start
            calls += len(batch)
            early = self.sets.fingerprints() if check and r == count - 1 else None
        last = list(dict.fromkeys(reversed(batch)))[::-1]  # every set the last round called, once
        wrong = self.sets.check_left(last, "eager calls", early) if check else ""
        return seconds / calls * 1e6, wrong
