"""Ray as the pool's backend, on a local CPU cluster that declares two GPUs (Ray pins each task's
CUDA_VISIBLE_DEVICES to one of them): builds and evaluations as tasks, one evaluation per GPU at a time,
and a whole population run through it into the same run directory as a local run."""
import pytest

from astra_sglang.harness.records import EvalRequest, KernelSource
from astra_sglang.optimize.agents.journal import RunLog
from astra_sglang.optimize.agents.loop import run
from astra_sglang.optimize.agents.scripted import ScriptedModel
from astra_sglang.optimize.pool.simulate import SimulatedBuilder, SimulatedEvaluator
from astra_sglang.optimize.records import RunConfig
from astra_sglang.paths import kernels_dir

ray = pytest.importorskip("ray")
KERNEL = (kernels_dir() / "silu_and_mul.cu").read_text()


@pytest.fixture(scope="module")
def pool():
    from astra_sglang.optimize.pool.ray_pool import RayPool

    with RayPool("local", evaluator=SimulatedEvaluator(seconds=0.3), builder=SimulatedBuilder(0.05),
                 init=dict(num_cpus=2, num_gpus=2)) as p:
        yield p


def test_tasks_on_fake_gpus(pool, tmp_path):
    reqs = []
    for i in range(6):
        path = tmp_path / f"k{i}.cu"
        path.write_text(f"// {i}\n{'// MARK build_fail' if i == 3 else ''}\nASTRA_ENTRY {{ return 0; }}\n")
        reqs.append(EvalRequest(kernel="silu_and_mul", candidate=KernelSource(path=str(path)), shapes=[(1, 4096)],
                                dtypes=["bfloat16"]))
    results = pool.map(reqs)
    assert [r.stage for r in results] == ["done", "done", "done", "build", "done", "done"]
    assert [r.candidate for r in results] == [f"k{i}.cu" for i in range(6)]  # the sources travelled with the tasks
    assert {r.gpu for r in results if r.ok} <= {"simulated GPU 0", "simulated GPU 1"}
    stats = pool.stats()
    assert stats.overlaps() == [] and stats.gpus == 2 and len(stats.evaluations) >= 5


def test_a_population_run_on_ray(pool, tmp_path):
    def script(messages):
        system = messages[0].content
        if "PlanningAgent" in system:
            return '```json\n{"plans": [{"parent": "r00", "plan": "1. Vectorize the loads."}]}\n```'
        if "TestingAgent" in system:
            return '```json\n{"shapes": [], "trials": 3}\n```'
        if "ProfilingAgent" in system:
            return "- memory bound"
        mark = "// MARK speedup=1.3" if len(messages) > 2 else "// MARK wrong"  # the repair fixes it
        return f"```cuda\n{mark}\n{KERNEL}```"

    config = RunConfig(kernel="silu_and_mul", start_source=str(kernels_dir() / "silu_and_mul.cu"), shapes="quick",
                       dtypes=["bfloat16"], rounds=1, population=2, plans=1, repairs=1, tune_configs=0)
    outcome = run(config, tmp_path / "run", pool, ScriptedModel(script, name="o4-mini"))
    assert outcome.winner is not None and outcome.winner.speedup == pytest.approx(1.3)
    cands = {r.payload["id"]: r.payload["status"] for r in RunLog(tmp_path / "run").of_role("cand")}
    assert cands == {"r01-c0-a1": "ok", "r01-c1-a1": "ok"}
