"""The no-LLM tuner of fused MoE configs: per batch size, a search of the config space through the isolated
evaluator, against the config SGLang picks itself.

Every candidate config is a `py:` candidate of the evaluator (moe_op), checked and timed like any kernel,
with SGLang's own pick as the baseline in the same process (interleaved CUDA-graph replays: the speedup is a
ratio of times taken side by side). One evaluation tries one config per batch size, so a round of W
evaluations tries W configs at every batch size at once (each process's start, the probes and SGLang's import
are paid once per evaluation, not per config).

Round 1 starts where tuning elsewhere ended: the configs SGLang ships for this expert shape on other GPUs and
Triton versions (nearest key), then the neighbours of SGLang's pick (one knob one step); later rounds climb from
each batch size's best so far; a fixed-seed sample of the pruned space fills what is left (space.py). After
the search, one final evaluation (a new process, every check) times the chosen table against SGLang's pick; a
batch size keeps a config only where it beat SGLang's pick by WIN_MARGIN in the search and is not slower in
the final evaluation, else SGLang's own pick stays.
"""
from __future__ import annotations

import random
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

from astra_sglang.harness.records import EvalRequest, EvalResult, KernelSource
from astra_sglang.optimize.tuner.cache import CacheKey, Measurement, TuneCache
from astra_sglang.triton.moe.configs import Pick
from astra_sglang.triton.moe.op import table_name
from astra_sglang.triton.moe.shapes import MoeShape
from astra_sglang.triton.moe.space import SMEM_BYTES, MoeConfig, neighbors, space
from astra_sglang.triton.results import BucketResult

WIN_MARGIN = 1.02
"""A config replaces SGLang's pick only when it measured at least this much faster in the search: the p10-p90
spread of per-replay ratios of one kernel against itself is 2-3% (limits.REGRESSION_FLOOR), and the median
of 20 such ratios moves by well under 2%."""
OP = "py:astra_sglang.triton.moe.op:"
BASELINE = KernelSource(path=OP + "sglang_pick", label="sglang")
FIRST_EVALUATION_S = 60.0
"""Assumed length of an evaluation until one has been measured (a process start with SGLang's import, Triton's
compiles of a new config, checks and timing of a few batch sizes): only schedules the first round under a
budget; later rounds go by the median of the evaluations measured."""

Batch = Callable[[list[EvalRequest]], list[EvalResult]]


@dataclass
class Setup:
    shape: MoeShape
    buckets: list[int]
    picks: dict[int, Pick]
    gpu: str
    triton: str
    source_hash: str
    seeds: dict[int, list[MoeConfig]] = field(default_factory=dict)
    """First guesses per batch size (SGLang's shipped configs for this expert shape elsewhere)."""
    smem: int = SMEM_BYTES


class MoeTuner:
    def __init__(self, setup: Setup, batch: Batch, cache: TuneCache | None = None, run_id: str = "",
                 echo=print, width: int = 4, timeout_s: float = 900.0):
        self.setup, self.batch, self.cache, self.run_id, self.echo = setup, batch, cache, run_id, echo
        self.width, self.timeout_s = width, timeout_s
        self.walls: list[float] = []
        self.cached = 0
        self.measured: dict[int, dict[str, Measurement]] = {}
        for tokens in setup.buckets:
            found = cache.lookup(self.key(tokens)) if cache else {}
            self.cached += len(found)
            self.measured[tokens] = dict(found)

    # -- what a subclass with other buckets and configs (attn_tune.AttnTuner) replaces -------------------
    def key(self, tokens: int) -> CacheKey:
        s = self.setup
        return CacheKey(gpu=s.gpu, triton=s.triton, source_hash=s.source_hash, shape=s.shape.shape(tokens),
                        dtype=s.shape.dtype, baseline=self.pick(tokens).code())

    def pick(self, tokens: int) -> MoeConfig:
        """SGLang's own config at this bucket."""
        return self.setup.picks[tokens].config

    def pick_source(self, tokens: int) -> str:
        return self.setup.picks[tokens].describe()

    def from_code(self, code: str) -> MoeConfig:
        return MoeConfig.from_code(code)

    def bucket_of(self, shape) -> int:
        """The bucket an evaluated shape belongs to."""
        return shape[0]

    def result_fields(self, tokens: int) -> dict:
        """A bucket's identity in its BucketResult."""
        return {"tokens": tokens}

    # -- bookkeeping --------------------------------------------------------------------------------------

    def _record(self, tokens: int, measurement: Measurement) -> None:
        self.measured[tokens][measurement.config] = measurement
        if self.cache:
            self.cache.add(self.key(tokens), measurement)

    def best(self, tokens: int) -> Measurement | None:
        good = [m for m in self.measured[tokens].values() if m.ok and m.speedup]
        return max(good, key=lambda m: m.speedup) if good else None

    # -- proposals ----------------------------------------------------------------------------------------
    def propose(self, tokens: int, first: bool) -> list[MoeConfig]:
        """Up to `width` configs not measured yet at this batch size, best guesses first."""
        s = self.setup
        pick = s.picks[tokens].config
        best = self.best(tokens)
        origin = MoeConfig.from_code(best.config) if best and best.speedup > 1.0 else pick
        ordered = (s.seeds.get(tokens, []) + neighbors(pick, s.smem)) if first else []
        ordered += neighbors(origin, s.smem)
        rest = space(tokens, s.shape.experts, s.shape.topk, s.smem)
        random.Random(tokens).shuffle(rest)
        out: list[MoeConfig] = []
        for config in ordered + rest:
            if config.code() in self.measured[tokens] or config == pick or config in out:
                continue
            out.append(config)
            if len(out) == self.width:
                break
        return out

    # -- evaluations --------------------------------------------------------------------------------------
    def request(self, table: dict[int, MoeConfig], label: str, final: bool = False) -> EvalRequest:
        s = self.setup
        return EvalRequest(kernel="fused_moe", candidate=KernelSource(path=OP + table_name(table), label=label),
                           baseline=BASELINE, shapes=[s.shape.shape(t) for t in sorted(table)],
                           dtypes=[s.shape.dtype], edge_cases=final, timeout_s=self.timeout_s)

    def evaluate_round(self, tag: str, proposals: dict[int, list[MoeConfig]]) -> int:
        """Evaluation j gives every batch size its j-th proposal; returns the number of evaluations."""
        depth = max((len(c) for c in proposals.values()), default=0)
        tables = [{t: c[j] for t, c in proposals.items() if j < len(c)} for j in range(depth)]
        if not tables:
            return 0
        labels = [f"{tag}-{j + 1}" for j in range(len(tables))]
        results = self.batch([self.request(t, label) for t, label in zip(tables, labels)])
        for table, label, result in zip(tables, labels, results):
            self.walls.append(result.wall_s)
            self._absorb(table, f"{self.run_id}/{label}", result)
            self.echo(f"  {label}: {len(table)} batch sizes, {'ok' if result.ok else result.reason[:110]} "
                      f"({result.wall_s:.0f} s)")
        return len(tables)

    def _absorb(self, table: dict[int, MoeConfig], run: str, result: EvalResult) -> None:
        rows = {self.bucket_of(r.shape): r for r in result.shapes}
        lost = False  # the first batch size without a row of a crashed evaluation is the one it died in
        for tokens in sorted(table):
            code = table[tokens].code()
            row = rows.get(tokens)
            if row is None:
                if not result.ok and not lost and result.stage in ("crash", "timeout"):
                    lost = True
                    self._record(tokens, Measurement(config=code, ok=False, reason=result.reason[:300], run=run))
                continue
            ok = row.correct is True and row.speedup is not None and row.candidate is not None
            reason = row.reason or ("" if row.covered else "declined: does not fit this GPU")
            self._record(tokens, Measurement(
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
            proposals = {t: self.propose(t, first=r == 1) for t in self.setup.buckets}
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
                proposals = {t: c[:need] for t, c in proposals.items()}
            self.echo(f"round {r}: {need} evaluations, up to {need} configs at each of "
                      f"{len(self.setup.buckets)} batch sizes")
            count += self.evaluate_round(f"r{r}", proposals)
        return count

    def settle(self) -> int:
        """Evaluations run between the search and the final one (none here: every batch size is its own key)."""
        return 0

    # -- the outcome --------------------------------------------------------------------------------------
    def chosen(self) -> dict[int, MoeConfig]:
        """Per batch size: the best config where it beat SGLang's pick by WIN_MARGIN, else SGLang's pick."""
        out = {}
        for tokens in self.setup.buckets:
            best = self.best(tokens)
            won = best is not None and best.speedup >= WIN_MARGIN
            out[tokens] = self.from_code(best.config) if won else self.pick(tokens)
        return out

    def finish(self, final: EvalResult | None, table: dict[int, MoeConfig]) -> list[BucketResult]:
        """Bucket results; a batch size whose config failed or lost in the final evaluation gets SGLang's pick."""
        rows = {self.bucket_of(r.shape): r for r in final.shapes} if final else {}
        out = []
        for tokens in self.setup.buckets:
            pick = self.pick(tokens)
            best = self.best(tokens)
            measured = self.measured[tokens].values()
            row = rows.get(tokens)
            tuned = table[tokens] != pick
            verdict = "tuned" if tuned else ("sglang-best" if best else
                                             ("no-valid-config" if measured else "not-measured"))
            final_speedup = row.speedup if row is not None and row.correct else None
            if tuned and (final_speedup is None or final_speedup < 1.0):
                verdict, table[tokens] = "sglang-best", pick
            out.append(BucketResult(
                **self.result_fields(tokens), pick=pick.code(), pick_source=self.pick_source(tokens),
                best=best.config if best else None, best_speedup=best.speedup if best else None,
                measured=len(measured), failed=sum(1 for m in measured if not m.ok), chosen=table[tokens].code(),
                verdict=verdict, final_speedup=final_speedup,
                final_us=row.candidate.median_us if row is not None and row.candidate else None,
                pick_us=row.baseline.median_us if row is not None and row.baseline else None))
        return out
