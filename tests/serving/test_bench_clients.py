"""The long-lived benchmark clients on CPU: real stand-in servers (logprob_stand_in.py) driven by the design runner,
the benchmark itself the stand-in module of bench_stand_in/ (SGLang's does not import without transformers), whose
log counts the client processes and the prompts each round sent. The shape that stand-in copies is checked against
the installed SGLang's own source."""
from __future__ import annotations

import ast
import importlib.util
import io
import os
import sys
from collections import Counter
from pathlib import Path

import pytest
from rich.console import Console
from stand_in import free_port_pair

from astra_sglang.errors import AstraError
from astra_sglang.serving import bench_clients, bench_worker, designs, runner
from astra_sglang.serving.bench_clients import BenchClient, ClientPool
from astra_sglang.serving.client import ClientSettings

HERE = Path(__file__).parent
REPO = HERE.parents[1]
STAND_IN = str(HERE / "logprob_stand_in.py")
ROW_KEYS = {"design", "period", "round", "arm", "gpu_index", "gpu_id", "metrics", "gpu", "bench_wall_s", "control"}
"""A timed row of ab.jsonl, as the runner wrote it before the long-lived clients."""
METRIC_KEYS = {"request_throughput", "output_throughput", "completed", "duration", "mean_ttft_ms", "mean_itl_ms",
               "mean_e2e_latency_ms"}
"""What server.read_bench keeps of the stand-in benchmark's line."""
CLIENT = ClientSettings(num_prompts=4, input_len=6, output_len=2, concurrency=2, seed=3)


@pytest.fixture
def bench_log(tmp_path, monkeypatch):
    """The stand-in benchmark first on the clients' path; its log."""
    log = tmp_path / "bench-stand-in.log"
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(HERE / "bench_stand_in"), str(REPO),
                                                      os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("BENCH_STAND_IN_LOG", str(log))
    return log


def _crossover(out: Path, periods: int, rounds: int, port: int | None = None) -> tuple[list[dict], str]:
    """A crossover A/A through the runner against two stand-in servers: (its rows, its console)."""
    port = port or free_port_pair()
    plan = runner.RunPlan(design="crossover", periods=designs.crossover(periods, rounds), client=CLIENT,
                          model_path="m", gpus=["0", "1"], port=port, control=True, parity_prompts=2,
                          parity_tokens=2, vocab=1000)

    def launch(arm, period):
        return [sys.executable, STAND_IN, str(port if arm == "A" else port + 1), "ref"], {}, None
    text = io.StringIO()
    runner.run(runner.load_or_write_plan(out, plan), out, launch, health_timeout=60,
               console=Console(file=text, highlight=False, width=200))
    return runner.read_jsonl(out / runner.ROWS), text.getvalue()


def _log(path: Path) -> tuple[list[list[str]], list[list[str]]]:
    lines = [line.split() for line in path.read_text().splitlines()]
    return [x[1:] for x in lines if x[0] == "import"], [x[1:] for x in lines if x[0] == "run"]


def test_one_client_per_arm_serves_the_warmup_and_every_round_of_every_period(tmp_path, bench_log, monkeypatch):
    starts = []
    start = ClientPool.start
    monkeypatch.setattr(ClientPool, "start", lambda self, ports: starts.append(list(ports)) or start(self, ports))
    port = free_port_pair()
    rows, console = _crossover(tmp_path / "aa", periods=2, rounds=2, port=port)
    imports, runs = _log(bench_log)
    assert starts == [[port, port + 1]]  # once for the run, both arms' ports, not once a period or a round
    for p in (port, port + 1):
        assert console.count(f"benchmark client of port {p}: one process for the whole run") == 1
    assert len(runs) == 2 * 2 * (1 + 2)  # 2 arms x 2 periods x (the warm-up + 2 timed rounds)
    assert sorted(name for _, name in imports) == ["sglang.benchmark.serving"] * 2  # two processes started, in all
    per_port = {port: {pid for pid, p, _ in runs if p == port} for _, port, _ in runs}
    assert len(per_port) == 2 and all(len(pids) == 1 for pids in per_port.values())
    assert len(set.union(*per_port.values())) == 2  # A's and B's rounds in their own processes: run at once
    assert len({digest for *_, digest in runs}) == 1  # every round of both arms sent the same prompts (seed 3)
    assert [(r["period"], r["round"], r["arm"]) for r in rows] == [
        (p, r, arm) for p in (1, 2) for r in (1, 2) for arm in ("A", "B")]
    assert all(set(r) == ROW_KEYS and set(r["metrics"]) == METRIC_KEYS for r in rows)
    assert all(r["metrics"]["completed"] == 4 for r in rows)
    assert len(list((tmp_path / "aa").glob("bench-*-p*-*.jsonl"))) == 12  # each round's own output file, as before


def test_without_an_in_process_entry_every_round_starts_its_own_client(tmp_path, bench_log, monkeypatch):
    monkeypatch.setenv("BENCH_STAND_IN_OLD", "1")  # an SGLang whose parser lives under __main__ only
    port = free_port_pair()
    rows, console = _crossover(tmp_path / "aa", periods=1, rounds=2, port=port)
    imports, runs = _log(bench_log)
    for p in (port, port + 1):
        assert (f"benchmark client of port {p}: a new process every round: sglang.benchmark.serving has no cli_main "
                "(another SGLang version)") in console
    assert Counter(name for _, name in imports) == {"sglang.benchmark.serving": 2, "__main__": 6}  # the 2 tries
    assert len({pid for pid, *_ in runs}) == len(runs) == 6  # a process per round: 2 arms x (warm-up + 2)
    assert len({digest for *_, digest in runs}) == 1
    assert all(set(r) == ROW_KEYS and set(r["metrics"]) == METRIC_KEYS for r in rows)  # the same rows either way


def test_each_port_says_how_its_own_rounds_run(tmp_path, monkeypatch):
    """Each worker imports the benchmark on its own: one port's may fall back to a process a round while the other's
    serves its rounds; the console says so for each port, once, where that port's way is decided."""
    class Worker:  # port 7001's cannot run the benchmark in-process, 7002's can
        def __init__(self, log: Path):
            self.port = int(log.stem.split("-")[1])

        def why_not(self) -> str:
            return "sglang.benchmark.serving has no cli_main" if self.port == 7001 else ""

        def run(self, argv: list[str], timeout_s: float) -> None:
            Path(argv[argv.index("--output-file") + 1]).write_text('{"output_throughput": 2.0}\n')

        def close(self) -> None:
            pass

    monkeypatch.setattr(bench_clients, "BenchClient", Worker)
    monkeypatch.setattr(ClientSettings, "run", lambda *_: {"output_throughput": 1.0})  # a process of its own
    text = io.StringIO()
    pool = ClientPool(CLIENT, "m", tmp_path, Console(file=text, highlight=False, width=200))
    pool.start([7001, 7002])
    got = [pool.run(port, tmp_path / f"bench-{port}-r{r}.jsonl")["output_throughput"] for r in (1, 2)
           for port in (7001, 7002)]
    assert got == [1.0, 2.0, 1.0, 2.0]
    assert text.getvalue().splitlines() == [
        "benchmark client of port 7001: a new process every round: sglang.benchmark.serving has no cli_main",
        "benchmark client of port 7002: one process for the whole run, SGLang's benchmark imported once"]


def test_a_failed_round_is_an_error_and_the_client_serves_the_next(tmp_path, bench_log):
    client = BenchClient(tmp_path / "client.log")
    try:
        assert client.why_not() == ""
        dead = CLIENT.argv("m", free_port_pair(), tmp_path / "x.jsonl")[3:]  # no server listens there
        with pytest.raises(AstraError, match="benchmark failed:\nURLError"):
            client.run(dead, timeout_s=60)
        with pytest.raises(AstraError, match="SystemExit: 2"):  # its CLI refuses the argument, as SGLang's does
            client.run(["--no-such-flag"], timeout_s=60)
        assert "unrecognized arguments: --no-such-flag" in (tmp_path / "client.log").read_text()
    finally:
        client.close()
    assert client.proc.returncode == 0


def test_an_unimportable_benchmark_says_why(tmp_path, bench_log, monkeypatch):
    monkeypatch.setenv("BENCH_STAND_IN_BROKEN", "1")
    client = BenchClient(tmp_path / "client.log")
    try:
        assert client.why_not() == ("sglang.benchmark.serving does not import here (ImportError: No module named "
                                    "'transformers')")
    finally:
        client.close()


def _calls(fn: ast.FunctionDef) -> list[str]:
    """Names called in `fn`, in source order (f(...) as 'f', a.b(...) as 'a.b')."""
    calls = [n for n in ast.walk(fn) if isinstance(n, ast.Call)]
    calls.sort(key=lambda n: (n.lineno, n.col_offset))
    return [ast.unparse(n.func) for n in calls]


def test_the_installed_sglang_benchmark_has_the_shape_the_worker_drives():
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("SGLang is not installed")
    source = Path(spec.submodule_search_locations[0]) / "benchmark" / "serving.py"
    tree = ast.parse(source.read_text())
    functions = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    assert set(bench_worker.ENTRY) <= set(functions) | {"get_tokenizer"}  # get_tokenizer: imported by name
    assert any(isinstance(n, ast.ImportFrom) and "get_tokenizer" in [a.name for a in n.names] for n in tree.body)
    assert "run_benchmark" in _calls(functions["cli_main"])  # by its module-global name: the worker's capture
    calls = _calls(functions["run_benchmark"])
    # seeded from --seed before the dataset is drawn, on every call: the same prompts every round
    assert calls.index("random.seed") < calls.index("get_dataset")
    assert calls.index("np.random.seed") < calls.index("get_dataset")
    assert {"get_tokenizer", "check_chat_template", "asyncio.run"} <= set(calls)
    assert "open" in _calls(functions["benchmark"])  # the round's JSONL line, appended to --output-file
