"""The generic bucket tuner on a deterministic fake op: a space of integer configs whose speedup over the pick
is a fixed function of (bucket, config); buckets that share a launch key get one config; the screening tier's
finalists as the only proposals; the final evaluation decides what stays."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from astra_sglang.harness.records import EvalRequest, EvalResult, KernelSource, ShapeResult, Timing
from astra_sglang.optimize.tuner.bucket import WIN_MARGIN, BucketTuner, Finalists
from astra_sglang.optimize.tuner.cache import CacheKey, TuneCache

PICK = 0


@dataclass(frozen=True, order=True)
class Knob:
    value: int

    def code(self) -> str:
        return f"v{self.value}"


def speed(bucket, value: int) -> float:
    """Peak 1.3 at value 7 for odd first sizes, at 3 for even ones; value 5 fails its check."""
    peak = 7 if bucket[0] % 2 else 3
    return 1.0 if value == PICK else 1.3 - 0.05 * abs(value - peak)


class FakeOp:
    def __init__(self, buckets, shared=False):
        self.buckets, self.shared = list(buckets), shared

    def key(self, bucket) -> CacheKey:
        return CacheKey(gpu="g", triton="t", source_hash="s", shape=bucket, dtype="bfloat16", baseline="v0")

    def pick(self, bucket) -> Knob:
        return Knob(PICK)

    def pick_source(self, bucket) -> str:
        return "the op's own"

    def from_code(self, code: str) -> Knob:
        return Knob(int(code[1:]))

    def bucket_of(self, shape):
        return tuple(shape[:2])

    def launch_key(self, bucket):
        return bucket[0] if self.shared else bucket

    def result_fields(self, bucket) -> dict:
        return {"tokens": bucket[0], "bucket": bucket}

    def request(self, table, label, final, timeout_s) -> EvalRequest:
        name = "_".join(f"{a}x{b}x{c.value}" for (a, b), c in sorted(table.items()))
        return EvalRequest(kernel="fake", candidate=KernelSource(path=f"py:fake:{name}", label=label),
                           shapes=[(*b, 1) for b in sorted(table)], dtypes=["bfloat16"], timeout_s=timeout_s)

    def proposals(self, bucket, best, first) -> list[Knob]:
        origin = int(best.config[1:]) if best else 1
        return [Knob(v) for v in sorted(range(1, 10), key=lambda v: (abs(v - origin), v))]


class FakeBatch:
    def __init__(self, final_factor: float = 1.0):
        self.final_factor, self.requests = final_factor, []

    def __call__(self, reqs):
        out = []
        for req in reqs:
            self.requests.append(req)
            table = {(int(a), int(b)): int(c) for a, b, c in
                     (item.split("x") for item in req.candidate.path.rsplit(":", 1)[1].split("_"))}
            rows = []
            for shape in req.shapes:
                value = table[tuple(shape[:2])]
                if value == 5:
                    rows.append(ShapeResult(shape=shape, dtype="bfloat16", correct=False, reason="wrong values"))
                    continue
                s = speed(shape, value) * (self.final_factor if req.candidate.label == "final" else 1.0)
                rows.append(ShapeResult(shape=shape, dtype="bfloat16", correct=True, speedup=s,
                                        candidate=Timing(median_us=100 / s, p10_us=100 / s, p90_us=100 / s),
                                        baseline=Timing(median_us=100.0, p10_us=100.0, p90_us=100.0)))
            out.append(EvalResult(kernel="fake", candidate=req.candidate.name(), ok=True, stage="done", shapes=rows,
                                  wall_s=10.0))
        return out


def _finish(tuner, batch):
    table = tuner.chosen()
    final = batch([tuner.request(table, "final", final=True)])[0]
    return table, tuner.finish(final, table)


def test_the_search_climbs_to_each_buckets_best():
    batch = FakeBatch()
    tuner = BucketTuner(FakeOp([(1, 0), (2, 0)]), batch, echo=lambda _: None, width=3)
    assert tuner.search(rounds=4) == 9  # three a round, each one config at both buckets; the fourth has none left
    table, results = _finish(tuner, batch)
    assert table == {(1, 0): Knob(7), (2, 0): Knob(3)}
    assert [r.verdict for r in results] == ["tuned", "tuned"]
    assert all(r.final_speedup == pytest.approx(1.3) for r in results)
    assert not tuner.measured[(1, 0)]["v5"].ok


def test_shared_launch_keys_take_one_config_for_all_their_buckets():
    batch = FakeBatch()
    tuner = BucketTuner(FakeOp([(3, 0), (3, 1), (4, 0)], shared=True), batch, echo=lambda _: None, width=9)
    tuner.search(rounds=1)
    tuner.settle()
    table = tuner.chosen()
    assert table[3, 0] == table[3, 1] == Knob(7) and table[4, 0] == Knob(3)


def test_finalists_are_the_only_proposals():
    batch = FakeBatch()
    finalists = {(1, 0): [Knob(6), Knob(5), Knob(0)], (2, 0): [Knob(2)]}
    tuner = BucketTuner(FakeOp([(1, 0), (2, 0)]), batch, echo=lambda _: None, width=3, proposer=Finalists(finalists))
    assert tuner.search(rounds=3) == 2  # round 1: the finalists (the pick skipped); nothing after
    assert set(tuner.measured[(1, 0)]) == {"v6", "v5"} and set(tuner.measured[(2, 0)]) == {"v2"}
    assert tuner.chosen() == {(1, 0): Knob(6), (2, 0): Knob(2)}


def test_the_final_evaluation_decides():
    batch = FakeBatch(final_factor=0.7)  # every tuned config measures slower than the pick in the final evaluation
    tuner = BucketTuner(FakeOp([(1, 0)]), batch, echo=lambda _: None, width=9)
    tuner.search(rounds=1)
    assert tuner.best((1, 0)).speedup >= WIN_MARGIN
    table, results = _finish(tuner, batch)
    assert table == {(1, 0): Knob(PICK)} and results[0].verdict == "sglang-best"


def test_measurements_are_cached_by_key(tmp_path):
    cache = TuneCache("fake", tmp_path)
    first = BucketTuner(FakeOp([(1, 0)]), FakeBatch(), cache, echo=lambda _: None, width=2)
    first.search(rounds=1)
    again = BucketTuner(FakeOp([(1, 0)]), FakeBatch(), cache, echo=lambda _: None, width=2)
    assert again.cached == 2 and again.measured == first.measured
    assert not {k.code() for k in again.propose((1, 0), first=True)} & set(first.measured[(1, 0)])


def _append_many(root: str, worker: int, go) -> None:
    from astra_sglang.optimize.tuner.cache import Measurement

    cache = TuneCache("shared", Path(root))
    key = CacheKey(gpu="g", triton="t", source_hash="s", shape=(worker,), dtype="bfloat16", baseline="v0")
    batches = [[Measurement(config=f"c{batch}-{i}", ok=True, speedup=1.0, reason="x" * 40) for i in range(300)]
               for batch in range(60)]  # batches of 300 lines: far past one 8 KiB buffer each
    go.wait(60)  # both processes write at once, not one after the other's start-up (a barrier of the two)
    for batch in batches:
        cache.add_many(key, batch)


def test_two_runs_appending_to_one_cache_at_once_lose_no_line(tmp_path):
    """host_split's bar01 and bar jobs share the cache folder: with both writing at once (their lines interleave),
    every line of both stays whole and none is lost."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    go = ctx.Barrier(2)
    procs = [ctx.Process(target=_append_many, args=(str(tmp_path), w, go)) for w in (1, 2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    cache = TuneCache("shared", tmp_path)
    for worker in (1, 2):
        key = CacheKey(gpu="g", triton="t", source_hash="s", shape=(worker,), dtype="bfloat16", baseline="v0")
        assert len(cache.lookup(key)) == 60 * 300


def test_an_evaluations_progress_line_says_where_its_wall_went():
    from astra_sglang.harness.records import EvalResult
    from astra_sglang.optimize.tuner.bucket import wall_text

    phases = {"process": 9.1, "build": 0.2, "load": 12.4, "shapes": 19.5}
    timed = EvalResult(kernel="fused_moe", candidate="final", wall_s=41.2, phases=phases)
    assert wall_text(timed) == "41 s: process 9, build 0, load 12, shapes 20"
    # a simulated result, or one the parent rebuilt after a crash: the wall alone
    assert wall_text(EvalResult(kernel="fused_moe", candidate="final", wall_s=40.0)) == "40 s"
