"""The local pool on CPU with simulated builds and evaluations: builds overlap evaluations, each GPU worker
is pinned to its GPU and never runs two evaluations at once, failed builds and compile-only requests never
take a GPU."""
import json
import os
from pathlib import Path

import pytest

from astra_sglang.harness.records import EvalRequest, KernelSource
from astra_sglang.optimize.pool.devices import GpuFacts, visible_gpus
from astra_sglang.optimize.pool.pool import LocalPool
from astra_sglang.optimize.pool.simulate import FLOOR, SimulatedBuilder, SimulatedEvaluator, simulated_speedup
from astra_sglang.optimize.pool.stats import PoolStats, Span


def requests(folder: Path, n: int, marks=lambda i: "", **kw) -> list[EvalRequest]:
    out = []
    for i in range(n):
        path = folder / f"k{i}.cu"
        path.write_text(f"// candidate {i}\n{marks(i)}ASTRA_ENTRY {{ return 0; }}\n")
        out.append(EvalRequest(kernel="silu_and_mul", candidate=KernelSource(path=str(path)),
                               shapes=[(1, 4096), (512, 14336)], dtypes=["bfloat16"], **kw))
    return out


def test_two_gpus_pinned_and_never_shared(tmp_path):
    trace = tmp_path / "trace.jsonl"
    reqs = requests(tmp_path, 8)
    with LocalPool(gpus=["0", "1"], evaluator=SimulatedEvaluator(seconds=0.3, trace=str(trace)),
                   builder=SimulatedBuilder(0.1), build_workers=2) as pool:
        results = pool.map(reqs)
        stats = pool.stats()
    assert [r.stage for r in results] == ["done"] * 8
    assert {r.gpu for r in results} == {"simulated GPU 0", "simulated GPU 1"}  # CUDA_VISIBLE_DEVICES per worker
    assert stats.overlaps() == [] and len(stats.evaluations) == 8 and len(stats.builds) == 8
    seen = [json.loads(x) for x in trace.read_text().splitlines()]
    for gpu in ("0", "1"):  # the evaluations' own clocks agree: one at a time per GPU
        spans = sorted((s["start"], s["end"]) for s in seen if s["gpu"] == gpu)
        assert spans and all(b[0] >= a[1] for a, b in zip(spans, spans[1:]))
    assert len({s["pid"] for s in seen}) == 2  # one worker process per GPU
    t = stats.throughput()
    assert t.gpus == 2 and t.evaluations == 8 and set(t.eval_share) == {"0", "1"} and min(t.eval_share.values()) > 0


def test_builds_overlap_evaluations_on_one_gpu(tmp_path):
    with LocalPool(gpus=["0"], evaluator=SimulatedEvaluator(seconds=0.2), builder=SimulatedBuilder(0.15),
                   build_workers=2) as pool:
        pool.map(requests(tmp_path, 6))
        stats = pool.stats()
    builds, evals = stats.builds, stats.evaluations
    assert any(b.start < e.end and e.start < b.end for b in builds for e in evals)  # nvcc ran while the GPU timed


def test_failed_builds_and_compile_only_take_no_gpu(tmp_path):
    (tmp_path / "c").mkdir()
    with LocalPool(gpus=["0"], evaluator=SimulatedEvaluator(seconds=0.05), builder=SimulatedBuilder(0.01)) as pool:
        results = pool.map(requests(tmp_path, 4, lambda i: "// MARK build_fail\n" if i % 2 else ""))
        compiled = pool.map(requests(tmp_path / "c", 2, compile_only=True))
        stats = pool.stats()
    assert [r.stage for r in results] == ["done", "build", "done", "build"]
    assert results[1].reason.startswith("build failed: kernel.cu(1): error: simulated")
    assert all(r.ok and r.stage == "done" for r in compiled)
    assert len(stats.evaluations) == 2  # only the two candidates that built and need a GPU


def test_a_bare_evaluator_builds_nothing_ahead(tmp_path):
    seen = []

    def evaluate(req):
        seen.append(req.candidate.path)
        return SimulatedEvaluator(seconds=0)(req)

    with LocalPool(gpus=[], evaluator=evaluate) as pool:
        assert pool.lanes == ["-"] and pool.builder is None
        result = pool.submit(requests(tmp_path, 1)[0]).result()
        assert pool.gpu_facts() == GpuFacts()
    assert result.ok and len(seen) == 1 and pool.stats().builds == []


def test_evaluator_exceptions_reach_the_caller(tmp_path):
    def evaluate(req):
        raise RuntimeError("evaluator bug")

    with LocalPool(gpus=[], evaluator=evaluate) as pool:
        with pytest.raises(RuntimeError, match="evaluator bug"):
            pool.submit(requests(tmp_path, 1)[0]).result()


def test_throughput_figures_from_spans():
    stats = PoolStats(lanes=["0", "1"], started=0.0, evaluations=[
        Span(lane="0", start=0, end=10), Span(lane="0", start=10, end=20), Span(lane="1", start=0, end=30)],
        builds=[Span(lane="cpu", start=0, end=2), Span(lane="cpu", start=0, end=1, cached=True)])
    t = stats.throughput(since=0.0, until=40.0)
    assert t.evaluations == 3 and t.per_gpu_hour == pytest.approx(3 * 3600 / 40 / 2)
    assert t.median_eval_s == 10 and t.busy_share == {"0": 0.5, "1": 0.75} and t.builds == 1
    assert t.eval_share == {"0": pytest.approx(2 / 3), "1": pytest.approx(1 / 3)}
    stats.evaluations.append(Span(lane="1", start=29, end=31))
    assert len(stats.overlaps()) == 1


def test_visible_gpus(monkeypatch):
    assert visible_gpus("0,1") == ["0", "1"] and visible_gpus("none") == [] and visible_gpus(" 2 ") == ["2"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    assert visible_gpus() == ["3", "5"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    assert visible_gpus() == []


@pytest.mark.parametrize("shape", [(1, 4096), (7, 4100), (8192, 14336)])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_simulated_speedups_are_deterministic_and_bounded(shape, dtype):
    text = "// some kernel\nASTRA_ENTRY { return 0; }\n"
    value = simulated_speedup(text, shape, dtype)
    assert value == simulated_speedup(text, shape, dtype) and 0.5 < value <= FLOOR
    assert simulated_speedup("// MARK speedup=1.3\n" + text, shape, dtype) == pytest.approx(1.3)


def test_exclusive_work_takes_a_gpu_like_an_evaluation(tmp_path):
    """A profiler run goes through a GPU worker (pinned there), never beside an evaluation on that GPU."""
    trace = tmp_path / "trace.jsonl"
    with LocalPool(gpus=["0", "1"], evaluator=SimulatedEvaluator(seconds=0.2, trace=str(trace)),
                   builder=SimulatedBuilder(0.01)) as pool:
        futures = [pool.submit(r) for r in requests(tmp_path, 4)]
        gpu = pool.exclusive(os.getenv, "CUDA_VISIBLE_DEVICES").result()
        [f.result() for f in futures]
        assert gpu in ("0", "1") and len(pool.stats().evaluations) == 4


def test_gpu_facts_are_probed_once_on_a_worker_while_evaluations_run(tmp_path, monkeypatch):
    import astra_sglang.optimize.pool.pool as pool_module

    probes = []
    monkeypatch.setattr(pool_module, "probe", lambda: probes.append(1) or GpuFacts(name="probed"))
    with LocalPool(gpus=["0"], evaluator=SimulatedEvaluator(seconds=0.1), builder=SimulatedBuilder(0.01)) as pool:
        futures = [pool.submit(r) for r in requests(tmp_path, 3)]
        assert pool.gpu_facts().name == "probed" and pool.gpu_facts().name == "probed"
        assert all(f.result().ok for f in futures)
    assert probes == [1]
