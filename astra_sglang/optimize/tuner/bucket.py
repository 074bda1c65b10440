"""The generic bucket tuner: per shape bucket, configs measured through the strict isolated evaluator against the
op's own pick, and the table of winners it confirms.

The op-specific parts are a `TuneOp` (its buckets and their pick, its config codes, the evaluator request for a
table of configs, which buckets share one config at launch, the cache key) and a `Proposer` (which configs to
try next at a bucket: the op's own walk of its space, or the screening tier's finalists, `Finalists`). The rest is
shared: every candidate config is an ordinary candidate of the evaluator, with the op's pick as the baseline in
the same process (interleaved CUDA-graph replays: the speedup is a ratio of times taken side by side). One
evaluation tries one config per bucket, so a round of W evaluations tries W configs at every bucket at once.

Buckets that share a launch key get one config (attention: a decode config is fixed at its batch size while the
kv length changes every replay): after the search each key's winners are measured at the key's other buckets
(`settle`), and a key takes the config with the best geomean over its buckets where that is at least WIN_MARGIN
and no bucket is slower than the pick. A final evaluation (a new process, every check) of the chosen table
decides: a key whose config is slower than the pick at any of its buckets there keeps the pick at all of them.
"""
from __future__ import annotations

import math
import statistics
import time
from collections import defaultdict
from typing import Callable, Generic, Hashable, Protocol, TypeVar

from astra_sglang.harness.records import EvalRequest, EvalResult
from astra_sglang.optimize.tuner.cache import CacheKey, Measurement, TuneCache
from astra_sglang.triton.results import BucketResult

WIN_MARGIN = 1.01
"""A config replaces the op's pick only when it measured at least this much faster in the search (and then held,
>= 1.0, in the final evaluation). Five strict evaluations of a config against itself on an H200 (2026-11-27: the
final evaluations where the pick was kept, Mixtral 8x14336x4096 @64, Qwen3-30B-A3B @1 and @64, and the bar's
ours-against-the-tuner's-best where both were one config, DeepSeek-V2-Lite @64 and Mixtral TP2 @1; verdicts.jsonl
and bar.md under benchmarks/results/2026-11-27-h200/moe-tiers and moe-bar) gave medians of 0.996-1.003x: the margin
is 2.5 times the largest deviation. At 1.02x the tiers kept SGLang's pick at Qwen3-30B-A3B @64 where SGLang's
tuner found a config 1.009-1.015x faster in three evaluations (0.988x its best: moe-bar page)."""
FIRST_EVALUATION_S = 60.0
"""Assumed length of an evaluation until one has been measured (a process start with SGLang's import, Triton's
compiles of a new config, checks and timing of a few buckets): only schedules the first round under a budget;
later rounds go by the median of the evaluations measured."""

B = TypeVar("B", bound=Hashable)
C = TypeVar("C")
Batch = Callable[[list[EvalRequest]], list[EvalResult]]


def wall_text(result: EvalResult) -> str:
    """An evaluation's wall and, where the child recorded them, its parts: "41 s: process 9, build 0, ..."."""
    parts = ", ".join(f"{name} {sec:.0f}" for name, sec in result.phases.items())
    return f"{result.wall_s:.0f} s" + (f": {parts}" if parts else "")


class TuneOp(Protocol[B, C]):
    buckets: list[B]

    def key(self, bucket: B) -> CacheKey: ...

    def pick(self, bucket: B) -> C:
        """The op's own config at this bucket (SGLang's pick): the baseline."""

    def pick_source(self, bucket: B) -> str: ...

    def from_code(self, code: str) -> C: ...

    def bucket_of(self, shape) -> B:
        """The bucket an evaluated shape belongs to."""

    def launch_key(self, bucket: B) -> Hashable:
        """Buckets with one key share one config."""

    def result_fields(self, bucket: B) -> dict:
        """A bucket's identity in its BucketResult."""

    def request(self, table: dict[B, C], label: str, final: bool, timeout_s: float) -> EvalRequest: ...

    def proposals(self, bucket: B, best: Measurement | None, first: bool) -> list[C]:
        """Configs to try at `bucket`, best guesses first (measured ones are skipped by the tuner)."""


Proposer = Callable[[object, Measurement | None, bool], list]


class Finalists:
    """The screening tier's finalists as the search's only proposals (round 1; nothing after)."""

    def __init__(self, table: dict):
        self.table = table

    def __call__(self, bucket, best: Measurement | None, first: bool) -> list:
        return list(self.table.get(bucket, [])) if first else []


class BucketTuner(Generic[B, C]):
    def __init__(self, op: TuneOp, batch: Batch, cache: TuneCache | None = None, run_id: str = "", echo=print,
                 width: int = 4, timeout_s: float = 900.0, proposer: Proposer | None = None):
        self.op, self.batch, self.cache, self.run_id, self.echo = op, batch, cache, run_id, echo
        self.width, self.timeout_s = width, timeout_s
        self.proposer = proposer or op.proposals
        self.walls: list[float] = []
        self.cached = 0
        self.measured: dict[B, dict[str, Measurement]] = {}
        for bucket in op.buckets:
            found = cache.lookup(op.key(bucket)) if cache else {}
            self.cached += len(found)
            self.measured[bucket] = dict(found)

    # -- bookkeeping --------------------------------------------------------------------------------------
    def _record(self, bucket: B, measurement: Measurement) -> None:
        self.measured[bucket][measurement.config] = measurement
        if self.cache:
            self.cache.add(self.op.key(bucket), measurement)

    def best(self, bucket: B) -> Measurement | None:
        good = [m for m in self.measured[bucket].values() if m.ok and m.speedup]
        return max(good, key=lambda m: m.speedup) if good else None

    def propose(self, bucket: B, first: bool) -> list[C]:
        """Up to `width` configs not measured yet at this bucket, best guesses first."""
        pick = self.op.pick(bucket)
        out: list[C] = []
        for config in self.proposer(bucket, self.best(bucket), first):
            if config.code() in self.measured[bucket] or config == pick or config in out:
                continue
            out.append(config)
            if len(out) == self.width:
                break
        return out

    def request(self, table: dict[B, C], label: str, final: bool = False) -> EvalRequest:
        return self.op.request(table, label, final, self.timeout_s)

    # -- evaluations --------------------------------------------------------------------------------------
    def evaluate_round(self, tag: str, proposals: dict[B, list[C]]) -> int:
        """Evaluation j gives every bucket its j-th proposal; returns the number of evaluations."""
        depth = max((len(c) for c in proposals.values()), default=0)
        tables = [{b: c[j] for b, c in proposals.items() if j < len(c)} for j in range(depth)]
        if not tables:
            return 0
        labels = [f"{tag}-{j + 1}" for j in range(len(tables))]
        results = self.batch([self.request(t, label) for t, label in zip(tables, labels)])
        for table, label, result in zip(tables, labels, results):
            self.walls.append(result.wall_s)
            self._absorb(table, f"{self.run_id}/{label}", result)
            self.echo(f"  {label}: {len(table)} buckets, {'ok' if result.ok else result.reason[:110]} "
                      f"({wall_text(result)})")
        return len(tables)

    def _absorb(self, table: dict[B, C], run: str, result: EvalResult) -> None:
        rows = {self.op.bucket_of(r.shape): r for r in result.shapes}
        lost = False  # the first bucket without a row of a crashed evaluation is the one it died in
        for bucket in sorted(table):
            code = table[bucket].code()
            row = rows.get(bucket)
            if row is None:
                if not result.ok and not lost and result.stage in ("crash", "timeout"):
                    lost = True
                    self._record(bucket, Measurement(config=code, ok=False, reason=result.reason[:300], run=run))
                continue
            ok = row.correct is True and row.speedup is not None and row.candidate is not None
            reason = row.reason or ("" if row.covered else "declined: does not fit this GPU")
            self._record(bucket, Measurement(
                config=code, ok=ok, speedup=row.speedup if ok else None,
                candidate_us=row.candidate.median_us if row.candidate else None,
                baseline_us=row.baseline.median_us if row.baseline else None, reason=reason[:300], run=run))

    def _estimate(self) -> float:
        return statistics.median(self.walls) if self.walls else FIRST_EVALUATION_S

    def search(self, rounds: int, budget_s: float | None = None, started: float | None = None) -> int:
        """Up to `rounds` rounds, none started that the budget (seconds since `started`, the final evaluation
        reserved) cannot finish. Returns the evaluations run."""
        started = time.perf_counter() if started is None else started
        count = 0
        for r in range(1, rounds + 1):
            proposals = {b: self.propose(b, first=r == 1) for b in self.op.buckets}
            need = max((len(c) for c in proposals.values()), default=0)
            if need == 0:
                self.echo(f"round {r}: nothing left to try")
                break
            if budget_s is not None:  # as many evaluations as fit, the final one kept aside
                fit = int((budget_s - (time.perf_counter() - started)) // self._estimate()) - 1
                if fit < 1:
                    self.echo(f"round {r}: skipped, no evaluation of ~{self._estimate():.0f} s fits the budget")
                    break
                need = min(need, fit)
                proposals = {b: c[:need] for b, c in proposals.items()}
            self.echo(f"round {r}: {need} evaluations, up to {need} configs at each of {len(self.op.buckets)} "
                      "buckets")
            count += self.evaluate_round(f"r{r}", proposals)
        return count

    # -- one config per launch key ------------------------------------------------------------------------
    def keys(self) -> dict[Hashable, list[B]]:
        out: dict[Hashable, list[B]] = defaultdict(list)
        for b in self.op.buckets:
            out[self.op.launch_key(b)].append(b)
        return dict(out)

    def settle(self) -> int:
        """Each key's winners (configs that beat the pick by WIN_MARGIN at one of its buckets) measured at the
        key's other buckets: evaluation j gives every bucket its j-th such config not measured there yet."""
        proposals: dict[B, list[C]] = {}
        for members in self.keys().values():
            winners = dict.fromkeys(m.config for b in members if (m := self.best(b)) and m.speedup >= WIN_MARGIN)
            for b in members:
                proposals[b] = [self.op.from_code(c) for c in winners
                                if c not in self.measured[b] and c != self.op.pick(b).code()]
        if not any(proposals.values()):
            return 0
        self.echo("settle: each launch key's winners at its other buckets (one config serves them all)")
        return self.evaluate_round("settle", proposals)

    def _speedups(self, code: str, members: list[B]) -> list[float] | None:
        out = []
        for b in members:
            m = self.measured[b].get(code)
            if code == self.op.pick(b).code():
                out.append(1.0)
            elif m is None or not m.ok or not m.speedup:
                return None  # not measured (or failed) at one of the key's buckets: not a candidate
            else:
                out.append(m.speedup)
        return out

    def chosen(self) -> dict[B, C]:
        """Per key: the config with the best geomean speedup over its buckets among those measured at all of them,
        where that geomean is at least WIN_MARGIN and no bucket is slower than the pick; else the pick."""
        out: dict[B, C] = {}
        for members in self.keys().values():
            scored = []
            for code in {c for b in members for c in self.measured[b]}:
                speeds = self._speedups(code, members)
                if speeds and min(speeds) >= 1.0:
                    scored.append((math.exp(sum(map(math.log, speeds)) / len(speeds)), code))
            best = max(scored, default=None)
            for b in members:
                out[b] = self.op.from_code(best[1]) if best and best[0] >= WIN_MARGIN else self.op.pick(b)
        return out

    # -- the outcome --------------------------------------------------------------------------------------
    def finish(self, final: EvalResult | None, table: dict[B, C]) -> list[BucketResult]:
        """Bucket results; a key whose config failed or lost at any of its buckets in the final evaluation gets
        the pick at all of them (`table` is updated to what is written)."""
        rows = {self.op.bucket_of(r.shape): r for r in final.shapes} if final else {}
        lost = set()
        for b in self.op.buckets:
            row = rows.get(b)
            speedup = row.speedup if row is not None and row.correct else None
            if table[b] != self.op.pick(b) and (speedup is None or speedup < 1.0):
                lost.add(self.op.launch_key(b))
        out = []
        for b in self.op.buckets:
            pick, best, row = self.op.pick(b), self.best(b), rows.get(b)
            measured = self.measured[b].values()
            if self.op.launch_key(b) in lost:
                table[b] = pick
            tuned = table[b] != pick
            verdict = "tuned" if tuned else ("sglang-best" if best or self.op.launch_key(b) in lost else
                                             ("no-valid-config" if measured else "not-measured"))
            out.append(BucketResult(
                **self.op.result_fields(b), pick=pick.code(), pick_source=self.op.pick_source(b),
                best=best.config if best else None, best_speedup=best.speedup if best else None,
                measured=len(measured), failed=sum(1 for m in measured if not m.ok), chosen=table[b].code(),
                verdict=verdict, final_speedup=row.speedup if row is not None and row.correct else None,
                final_us=row.candidate.median_us if row is not None and row.candidate else None,
                pick_us=row.baseline.median_us if row is not None and row.baseline else None))
        return out
