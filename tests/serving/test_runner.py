"""The design runner on CPU: which server starts on which GPU, the warm-up round, simultaneous rounds, rows
written per finished period, resuming a cut run, the stop rule, the report and summary; and, with real stand-in
processes serving a small model's logprobs, the parity check catching a wrong norm through the whole path."""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from stand_in import free_port_pair

from astra_sglang.errors import AstraError
from astra_sglang.cli.ab import ab as ab_command
from astra_sglang.serving import ab as ab_mod
from astra_sglang.serving import designs, report, runner, server, summary
from astra_sglang.serving.bench_clients import ClientPool
from astra_sglang.serving.client import ClientSettings

STAND_IN = str(Path(__file__).with_name("logprob_stand_in.py"))


def _plan(design="crossover", periods=3, rounds=2, **kw) -> runner.RunPlan:
    gpus = ["0", "1"] if design == "crossover" else []
    schedule = designs.crossover(periods, rounds) if design == "crossover" else designs.restarts(periods, rounds)
    return runner.RunPlan(design=design, periods=schedule, client=ClientSettings(num_prompts=64, concurrency=32),
                          model_path="m", gpus=gpus, port=31000, parity_prompts=2, parity_tokens=2, parity_top_k=2,
                          **kw)


@pytest.fixture
def fake(monkeypatch):
    """server.py's functions and the client replaced by recorders; throughput B = A * (1 + effect)."""
    events, state = [], {"fail": None, "effect": 0.0}

    def start(argv, env, log):
        events.append(f"start {argv[0]} gpu={env.get('CUDA_VISIBLE_DEVICES')}")
        return argv[0]

    def run(self, model_path, port, bench_file, timeout_s=900.0):
        events.append(f"bench {bench_file.stem} n={self.num_prompts}")
        state.setdefault("argv", {})[bench_file.stem] = self.argv(model_path, port, "OUT", python="py")
        if bench_file.stem == state["fail"]:
            raise AstraError("benchmark failed")
        b = port == 31001
        return {"output_throughput": 1000.0 * (1 + state["effect"] if b else 1.0), "mean_itl_ms": 3.0,
                "mean_ttft_ms": 50.0}

    def generate(port, body):
        return {"meta_info": {"output_token_logprobs": [[-1.0, 5, None]] * 2,
                              "output_top_logprobs": [[[-1.0, 5, None], [-2.0, 6, None]]] * 2}}
    monkeypatch.setattr(server, "start_server", start)
    monkeypatch.setattr(server, "wait_healthy", lambda proc, port, log, timeout, since=None:
                        events.append(f"healthy {proc}") or 40.0)
    monkeypatch.setattr(server, "stop_server", lambda proc: events.append(f"stop {proc}"))
    monkeypatch.setattr(server, "server_info", lambda port: {"max_total_num_tokens": 1000})
    monkeypatch.setattr(server, "post_generate", generate)
    monkeypatch.setattr(ClientSettings, "run", run)
    monkeypatch.setattr(ClientPool, "IN_PROCESS", False)  # every round through the replaced ClientSettings.run
    monkeypatch.setattr(runner.time, "sleep", lambda s: None)
    return events, state


def _launch(arm, period):
    return [f"{arm}{period}"], {}, None


def test_crossover_period_starts_both_warms_up_then_benchmarks_both_at_once(tmp_path, fake):
    events, state = fake
    plan = _plan(periods=2, rounds=2)
    assert runner.run(plan, tmp_path, _launch) == 2
    first = events[:events.index("stop A1") + 2]
    assert first[:3] == ["start A1 gpu=0", "healthy A1", "start B1 gpu=1"]  # the call's first period: staggered
    second = events[events.index("stop B1") + 1:]
    assert second[:3] == ["start B2 gpu=0", "start A2 gpu=1", "healthy B2"]  # then both at once, GPU 0's first
    assert set(first[4:6]) == {"bench bench-A-p1-warmup n=64", "bench bench-B-p1-warmup n=64"}  # untimed
    assert set(first[6:8]) == {"bench bench-A-p1-r1 n=64", "bench bench-B-p1-r1 n=64"}
    # the warm-up is a whole timed round's load (the same prompts, lengths, concurrency, warm-up requests, seed)
    assert state["argv"]["bench-A-p1-warmup"] == state["argv"]["bench-A-p1-r1"]
    assert state["argv"]["bench-B-p2-warmup"] == state["argv"]["bench-B-p2-r2"]
    assert first[-2:] == ["stop A1", "stop B1"]
    assert "start A2 gpu=1" in events and "start B2 gpu=0" in events  # swapped in period 2
    rows = runner.read_jsonl(tmp_path / runner.ROWS)
    assert [(r["period"], r["round"], r["arm"], r["gpu_index"]) for r in rows] == [
        (1, 1, "A", 0), (1, 1, "B", 1), (1, 2, "A", 0), (1, 2, "B", 1),
        (2, 1, "A", 1), (2, 1, "B", 0), (2, 2, "A", 1), (2, 2, "B", 0)]
    assert all(r["design"] == "crossover" for r in rows)
    assert runner.done_periods(tmp_path) == {1, 2}
    probes = runner.read_jsonl(tmp_path / runner.PROBES)
    assert [(p["period"], p["arm"]) for p in probes] == [(1, "A"), (1, "B"), (2, "A"), (2, "B")]
    assert json.loads((tmp_path / "settings-diff-p1.json").read_text())["differences"] == []


def test_servers_started_together_each_count_their_start_from_their_own_launch(tmp_path, monkeypatch):
    """Both servers of a period launch at once and are waited for one after the other: the second's ready time is
    its own start's (a wait that counted from the first one's health read 3 s for a 60 s start)."""
    clock = {"now": 100.0}
    monkeypatch.setattr(server.time, "monotonic", lambda: clock["now"])  # runner's and server's `time` alike
    monkeypatch.setattr(server.time, "sleep", lambda s: clock.__setitem__("now", clock["now"] + s))
    healthy_at = {31000: 160.0, 31001: 162.0}  # A's and B's ports: 60 s and 62 s after their launch at 100 s

    class Proc(str):
        def poll(self):
            return None
    monkeypatch.setattr(server, "start_server", lambda argv, env, log: Proc(argv[0]))
    monkeypatch.setattr(server, "_http", lambda port, path: 200 if clock["now"] >= healthy_at[port] else 503)
    monkeypatch.setattr(server, "stop_server", lambda proc: None)
    monkeypatch.setattr(server, "server_info", lambda port: {"max_total_num_tokens": 1000})
    monkeypatch.setattr(server, "post_generate", lambda port, body: {"meta_info": {
        "output_token_logprobs": [[-1.0, 5, None]] * 2, "output_top_logprobs": [[[-1.0, 5, None]]] * 2}})
    plan = _plan(periods=1, rounds=0)
    _, starts, _ = runner.run_period(plan, plan.periods[0], tmp_path, _launch, clients=None)
    assert {s["arm"]: s["ready_s"] for s in starts} == pytest.approx({"A": 60.0, "B": 62.0})


def test_a_failed_period_stops_its_servers_writes_nothing_and_the_same_run_resumes(tmp_path, fake):
    events, state = fake
    plan = runner.load_or_write_plan(tmp_path, _plan(periods=3, rounds=1))
    state["fail"] = "bench-B-p2-r1"
    with pytest.raises(AstraError, match="benchmark failed"):
        runner.run(plan, tmp_path, _launch)
    assert sorted(events[-2:]) == ["stop A2", "stop B2"] and runner.done_periods(tmp_path) == {1}
    assert {r["period"] for r in runner.read_jsonl(tmp_path / runner.ROWS)} == {1}  # nothing of period 2
    state["fail"], events[:] = None, []
    again = runner.load_or_write_plan(tmp_path, _plan(periods=3, rounds=1))
    assert runner.run(again, tmp_path, _launch) == 2
    assert events[0] == "start B2 gpu=0" and runner.done_periods(tmp_path) == {1, 2, 3}
    with pytest.raises(AstraError, match="another client"):
        runner.load_or_write_plan(tmp_path, _plan(periods=3, rounds=1).model_copy(
            update={"client": ClientSettings(num_prompts=8)}))


def _starts(period: int, period_s: float, staggered: bool = False, swap: bool = False) -> str:
    """starts.jsonl lines of a crossover period as the runner writes them (A on GPU 0 in odd periods)."""
    a = (period - 1) % 2 if not swap else period % 2
    return "".join(json.dumps({"period": period, "arm": arm, "gpu_index": gpu, "gpu_id": str(gpu), "ready_s": 40.0,
                               "period_s": period_s, "staggered": staggered}) + "\n"
                   for arm, gpu in (("A", a), ("B", 1 - a)))


def test_stop_after_starts_no_period_the_longest_one_would_carry_past(tmp_path, fake):
    events, _ = fake
    plan = _plan(periods=4, rounds=1)
    (tmp_path / runner.STARTS).write_text(_starts(1, 120.0))
    assert runner.run(plan, tmp_path, _launch, stop_after=100.0) == 0 and events == []
    # a staggered first period's 300 s gives way to a timed normal one
    (tmp_path / runner.STARTS).write_text(_starts(1, 300.0, staggered=True) + _starts(2, 90.0))
    assert runner.run(plan, tmp_path, _launch, stop_after=80.0) == 0
    assert runner.run(plan, tmp_path, _launch, stop_after=200.0) == 2  # 90 s a period, not the staggered 300


@pytest.mark.parametrize("recorded, why", [
    (_starts(1, 60.0, swap=True), "does not match the plan at period 1: recorded A on GPU 1 (CUDA_VISIBLE_DEVICES 1), "
                                  "B on GPU 0 (CUDA_VISIBLE_DEVICES 0); planned A on GPU 0 (CUDA_VISIBLE_DEVICES 0), "
                                  "B on GPU 1 (CUDA_VISIBLE_DEVICES 1)"),
    (_starts(1, 60.0).splitlines()[0] + "\n", "does not match the plan at period 1: recorded A on GPU 0 "
                                              "(CUDA_VISIBLE_DEVICES 0); planned A on GPU 0"),  # B's start is missing
    (_starts(1, 60.0) * 2, "does not match the plan at period 1: recorded A on GPU 0 (CUDA_VISIBLE_DEVICES 0), "
                           "B on GPU 1 (CUDA_VISIBLE_DEVICES 1), A on GPU 0"),  # started twice
    (_starts(1, 60.0) + _starts(7, 60.0), "records period 7, which the plan of"),
])
def test_a_resumed_run_whose_recorded_starts_are_not_the_plans_is_refused(tmp_path, fake, recorded, why):
    """starts.jsonl says which periods are done: a record that is not the plan's periods, arms and GPUs would have
    the run skip periods it never ran as planned. It is refused in one line naming the period; nothing starts."""
    events, _ = fake
    plan = runner.load_or_write_plan(tmp_path, _plan(periods=3, rounds=1))
    (tmp_path / runner.STARTS).write_text(recorded)
    with pytest.raises(AstraError, match=re.escape(why)) as refused:
        runner.run(plan, tmp_path, _launch)
    assert "\n" not in str(refused.value) and str(tmp_path / runner.STARTS) in str(refused.value)
    assert events == [] and (tmp_path / runner.STARTS).read_text() == recorded


def test_a_resumed_run_whose_starts_are_the_plans_goes_on(tmp_path, fake):
    events, _ = fake
    plan = runner.load_or_write_plan(tmp_path, _plan(periods=3, rounds=1))
    assert runner.run(plan, tmp_path, _launch) == 3
    lines = (tmp_path / runner.STARTS).read_text().splitlines()
    (tmp_path / runner.STARTS).write_text("\n".join(lines[:4]) + "\n")  # periods 1 and 2 done, as the runner wrote
    events[:] = []
    assert runner.run(plan, tmp_path, _launch) == 1 and events[0] == "start A3 gpu=0"
    restarts = runner.load_or_write_plan(tmp_path / "r", _plan("restarts", periods=3, rounds=1))
    assert runner.run(restarts, tmp_path / "r", _launch) == 6  # one start a period, no GPU named: CUDA_... unset
    assert runner.run(restarts, tmp_path / "r", _launch) == 0


def test_the_committed_h200_aa_starts_are_its_plans():
    """The recorded run this check would resume (benchmarks/results, 4x H200 2026-11-27): its starts pass."""
    folder = Path(__file__).parents[2] / "benchmarks" / "results" / "2026-11-27-h200" / "serving" / "aa"
    plan = runner.RunPlan.model_validate_json((folder / runner.PLAN).read_text())
    runner.check_starts(plan, folder)
    assert runner.done_periods(folder) == {1, 2, 3, 4, 5} and len(plan.periods) == 6  # the stop rule ended it


def test_restarts_run_one_server_per_period_on_the_default_gpu(tmp_path, fake):
    events, _ = fake
    runner.run(_plan("restarts", periods=3, rounds=1), tmp_path, _launch)
    assert [e for e in events if e.startswith("start")] == [
        "start A1 gpu=None", "start B2 gpu=None", "start B3 gpu=None", "start A4 gpu=None", "start A5 gpu=None",
        "start B6 gpu=None"]
    assert not list(tmp_path.glob("settings-diff-*.json"))  # one server at a time: nothing to compare


def test_design_report_and_summary_of_an_aa_crossover(tmp_path, fake):
    _, state = fake
    state["effect"] = 0.004
    runner.run(runner.load_or_write_plan(tmp_path, _plan(periods=4, rounds=2, control=True)), tmp_path, _launch)
    path = report.write_design_report(tmp_path)
    s = summary.RunSummary.model_validate_json((tmp_path / summary.SUMMARY).read_text())
    thr = s.metrics[0]
    assert s.design == "crossover" and s.periods_done == 4 and thr.rounds == 8 and thr.units == 4
    assert thr.typical_pct == pytest.approx(0.4)
    assert s.aa_ok is False and any("excludes 0" in r for r in s.aa_reasons)  # a constant +0.4%: no spread
    text = path.read_text()
    assert text.startswith("# Serving A/A control (crossover)")
    assert "64 prompts of 1024 tokens in / 256 out (fixed lengths), 32 concurrent, seed 1" in text
    assert "| 2 | 1 | 0 | +0.40%, +0.40% |" in text  # period 2: A on GPU 1, B on GPU 0
    assert s.parity.ok and "judged\nagainst the tolerance alone" in text


def test_cli_crossover_control_end_to_end(tmp_path, fake, monkeypatch):
    monkeypatch.setattr(ab_mod, "sglang_available", lambda: True)
    res = CliRunner().invoke(ab_command, ["--model-path", "m", "--design", "crossover", "--gpus", "0,1", "--control",
                                         "--runs", "3", "--rounds", "1", "--port", "31000", "--num-prompts", "64",
                                         "--out", str(tmp_path / "aa")])
    assert res.exit_code == 0, res.output
    assert "3 period(s) run" in res.output
    plan = runner.RunPlan.model_validate_json((tmp_path / "aa" / runner.PLAN).read_text())
    assert plan.control and plan.gpus == ["0", "1"] and len(plan.periods) == 3
    starts = tmp_path / "aa" / runner.STARTS
    starts.write_text(starts.read_text().replace('"gpu_id": "1"', '"gpu_id": "3"'))  # not where the plan put them
    again = CliRunner().invoke(ab_command, ["--model-path", "m", "--design", "crossover", "--gpus", "0,1", "--control",
                                           "--runs", "3", "--rounds", "1", "--port", "31000", "--num-prompts", "64",
                                           "--out", str(tmp_path / "aa")])
    last = again.output.splitlines()[-1]  # after the model-path note: the refusal, in one line
    assert again.exit_code == 1 and "does not match the plan at period 1: recorded A on GPU 0 (CUDA_VISIBLE_DEVICES " \
           "0), B on GPU 1 (CUDA_VISIBLE_DEVICES 3)" in last
    res = CliRunner().invoke(ab_command, ["--model-path", "m", "--design", "crossover", "--gpus", "0", "--control",
                                         "--out", str(tmp_path / "x")])
    assert res.exit_code == 1 and "needs two GPUs" in res.output


def _stand_in_launch(modes: dict[str, str], port: int):
    def launch(arm, period):
        p = port if arm == "A" else port + 1
        return [sys.executable, STAND_IN, str(p), modes[arm]], {}, None
    return launch


@pytest.mark.parametrize("b_mode, ok", [("ref", True), ("wrong-fused", False)])
def test_parity_through_the_runner_catches_the_wrong_norm(tmp_path, b_mode, ok):
    """Two real processes serving the small model: B's norms right (an A/A) or scaling by 1.01 (a wrong patch)."""
    port = free_port_pair()
    plan = runner.RunPlan(design="crossover", periods=designs.crossover(1, 0), client=ClientSettings(),
                          model_path="m", gpus=["0", "1"], port=port, parity_prompts=4, parity_tokens=8,
                          vocab=1000)
    runner.run(runner.load_or_write_plan(tmp_path, plan), tmp_path, _stand_in_launch({"A": "ref", "B": b_mode}, port),
               health_timeout=60)
    s = summary.summarize(tmp_path)
    assert s.parity is not None and s.parity.ok is ok, s.parity.lines
    assert s.metrics == [] and runner.read_jsonl(tmp_path / runner.ROWS) == []  # rounds 0: parity only


def test_no_stagger_starts_the_first_period_at_once(tmp_path, fake):
    events, _ = fake
    runner.run(_plan(periods=1, rounds=0), tmp_path, _launch, stagger_first=False)
    assert events[:3] == ["start A1 gpu=0", "start B1 gpu=1", "healthy A1"]


@pytest.mark.parametrize("aa_model, reference", [
    ("m", "the A/A of {aa}"),
    ("another-model", "A against itself across its starts (the A/A of {aa} is of another-model: not this model's "
                      "reference)")])
def test_an_aa_of_another_model_is_no_parity_reference(tmp_path, fake, aa_model, reference):
    """The A/A's logprob differences bound B's only for the model it served; for another model the run's own A
    across its starts is the reference, and the summary says why."""
    aa, ab = tmp_path / "aa", tmp_path / "ab"
    runner.run(runner.load_or_write_plan(aa, _plan(periods=2, control=True).model_copy(
        update={"model_path": aa_model})), aa, _launch)
    runner.run(runner.load_or_write_plan(ab, _plan(periods=2)), ab, _launch)
    s = summary.parity_summary(ab, control=False, aa_dir=aa)
    assert s is not None and s.ok and s.reference == reference.format(aa=aa)


def _patches(folder: Path, scale: str) -> Path:
    (folder / "op").mkdir(parents=True)
    (folder / "op" / "manifest.json").write_text('{"scale": ' + scale + "}")
    return folder


def test_a_resumed_run_finds_its_patches_elsewhere_by_their_content(tmp_path):
    """A run's next call may hold the same patches in another folder (a new output folder, another machine): it
    goes on, serving them from there; other patches, or a plan without their digest, are refused."""
    def plan(folder: Path | None) -> runner.RunPlan:
        return _plan(periods=3, rounds=1, patches=str(folder) if folder else None,
                     patches_sha=runner.folder_digest(folder))
    first, moved = _patches(tmp_path / "call1" / "p", "1.0"), _patches(tmp_path / "call2" / "p", "1.0")
    runner.load_or_write_plan(tmp_path / "run", plan(first))
    again = runner.load_or_write_plan(tmp_path / "run", plan(moved))
    assert again.patches == str(moved) and again.patches_sha == runner.folder_digest(first)
    assert runner.RunPlan.model_validate_json((tmp_path / "run" / runner.PLAN).read_text()).patches == str(moved)
    other = _patches(tmp_path / "call3" / "p", "1.01")
    with pytest.raises(AstraError, match="another patches_sha"):
        runner.load_or_write_plan(tmp_path / "run", plan(other))
    old = _plan(periods=3, rounds=1, patches=str(first))  # a plan written before digests: the path decides
    runner.load_or_write_plan(tmp_path / "old", old)
    with pytest.raises(AstraError, match="another patches"):
        runner.load_or_write_plan(tmp_path / "old", _plan(periods=3, rounds=1, patches=str(moved)))
    assert runner.folder_digest(None) is None
