"""`astra-sglang ab --paired` on CPU: the round runner with faked servers and benchmarks (start/stop order,
counterbalancing, warm-up, rows and report after every round, cleanup on failure), the same runner against two
stand-in HTTP servers, the paired statistics on hand-made numbers, the paired report, and the CLI."""
from __future__ import annotations

import json
import os
import signal
import sys
import time

import pytest
from click.testing import CliRunner
from stand_in import SERVER as STAND_IN, free_port_pair

from astra_sglang.cli.ab import ab as ab_command
from astra_sglang.errors import AstraError
from astra_sglang.patching.stats import ENV_STATS_INTERVAL
from astra_sglang.serving import ab as ab_mod
from astra_sglang.serving import server as server_mod
from astra_sglang.serving import paired as paired_mod
from astra_sglang.serving import design_stats, license, paired_stats, report

OPTS = {"port": 31000, "health_timeout": 5, "num_prompts": 512, "concurrency": 8, "extra": [], "repeats": 1}


def _arms(tmp_path, stats_interval=None):
    env_b = {"ASTRA_SGLANG_PATCHES": "p", **({ENV_STATS_INTERVAL: stats_interval} if stats_interval else {})}
    return (paired_mod.PairedArm("A", 31000, ["serve", "A"], {}),
            paired_mod.PairedArm("B", 31001, ["serve", "B"], env_b, tmp_path / "stats" / "B-paired"))


@pytest.fixture
def fake(monkeypatch):
    """server.py's server and benchmark functions replaced by recorders; `fail` makes one benchmark raise."""
    events, state = [], {"fail": None, "health": {}}

    def start(argv, env, log):  # the "process" is the arm's name (from the port when the CLI built the argv)
        name = {"31000": "A", "31001": "B"}[argv[argv.index("--port") + 1]] if "--port" in argv else argv[-1]
        events.append(f"start {name}")
        return name

    def healthy(proc, port, log, timeout):
        events.append(f"healthy {proc}")
        if state["health"].get(proc):
            raise state["health"][proc]
        return {"A": 40.0, "B": 45.0}[proc]

    def bench(port, path, opts):
        events.append(f"bench {path.stem} n={opts['num_prompts']}")
        if path.stem == state["fail"]:
            raise AstraError("benchmark failed")
        arm = {31000: "A", 31001: "B"}[port]
        return {"output_throughput": 100.0 if arm == "A" else 105.0, "mean_ttft_ms": 50.0, "mean_itl_ms": 3.0}

    monkeypatch.setattr(server_mod, "start_server", start)
    monkeypatch.setattr(server_mod, "wait_healthy", healthy)
    monkeypatch.setattr(server_mod, "run_benchmark", bench)
    monkeypatch.setattr(server_mod, "parity_probe", lambda port, skip: events.append(f"probe {port}") or [[port]])
    monkeypatch.setattr(server_mod, "stop_server", lambda proc: events.append(f"stop {proc}"))
    pools = {31000: 900, 31001: 800}
    monkeypatch.setattr(server_mod, "server_info", lambda port: {"max_total_num_tokens": pools[port]})
    monkeypatch.setattr(paired_mod.time, "sleep", lambda s: events.append(f"sleep {s}"))
    return events, state


def test_round_order_counterbalanced():
    assert [paired_mod.round_order(r) for r in range(1, 6)] == ["AB", "BA", "AB", "BA", "AB"]


def test_rounds_start_both_counterbalance_and_stop_both(tmp_path, fake):
    events, _ = fake
    a, b = _arms(tmp_path, stats_interval="2.0")
    written = []
    rows = paired_mod.run_rounds(a, b, OPTS, tmp_path, runs=3, warmup=1, on_round=lambda new, all_rows:
                                 written.append(([r["arm"] for r in new], len(all_rows))))
    assert events == ["start A", "healthy A", "start B", "healthy B",  # B starts once A is up (memory sizing)
                      "bench bench-warmup-A-1 n=512", "bench bench-warmup-B-1 n=512",  # full, not recorded
                      "bench bench-A-1 n=512", "bench bench-B-1 n=512", "probe 31000", "probe 31001",
                      "bench bench-B-2 n=512", "bench bench-A-2 n=512",
                      "bench bench-A-3 n=512", "bench bench-B-3 n=512",
                      "sleep 3.0", "stop B", "stop A"]  # one stats interval, then both servers stopped
    assert written == [(["A", "B"], 2), (["B", "A"], 4), (["A", "B"], 6)]  # after every round, not at the end
    assert [(r["arm"], r["run"], r["order"], r["repeat"], r["paired"]) for r in rows] == [
        ("A", 1, "AB", 1, True), ("B", 1, "AB", 1, True), ("B", 2, "BA", 1, True), ("A", 2, "BA", 1, True),
        ("A", 3, "AB", 1, True), ("B", 3, "AB", 1, True)]
    assert [r["outputs"] for r in rows] == [[[31000]], [[31001]], None, None, None, None]  # parity once per server
    assert {r["arm"]: (r["ready_s"], r["kv_tokens"]) for r in rows} == {"A": (40.0, 900), "B": (45.0, 800)}
    assert all(r["stats_dir"] == str(tmp_path / "stats" / "B-paired") for r in rows if r["arm"] == "B")
    assert all("stats_dir" not in r for r in rows if r["arm"] == "A")
    assert {r["metrics"]["output_throughput"] for r in rows if r["arm"] == "B"} == {105.0}


def test_b_first_starts_the_patched_server_first_and_says_so(tmp_path, fake):
    events, _ = fake
    a, b = _arms(tmp_path)
    rows = paired_mod.run_rounds(a, b, OPTS, tmp_path, runs=1, warmup=0, on_round=lambda new, all_rows: None,
                                 b_first=True)
    assert events[:4] == ["start B", "healthy B", "start A", "healthy A"]
    assert {r["arm"]: r["started_first"] for r in rows} == {"A": False, "B": True}
    assert json.loads((tmp_path / "server-info-B.json").read_text()) == {"max_total_num_tokens": 800}


def test_failing_benchmark_stops_both_servers_and_keeps_earlier_rounds(tmp_path, fake):
    events, state = fake
    state["fail"] = "bench-A-2"  # round 2 runs B then A: A's benchmark fails after B's succeeded
    written = []
    with pytest.raises(AstraError, match="benchmark failed"):
        paired_mod.run_rounds(*_arms(tmp_path), OPTS, tmp_path, runs=3, warmup=0,
                              on_round=lambda new, all_rows: written.append(len(all_rows)))
    assert events[-3:] == ["bench bench-A-2 n=512", "stop B", "stop A"]
    assert written == [2]  # round 1 was written before round 2 failed; the half round is not


def test_b_failing_to_start_stops_a(tmp_path, fake):
    events, state = fake
    state["health"]["B"] = AstraError("server not healthy after 5 s")
    with pytest.raises(AstraError, match="not healthy"):
        paired_mod.run_rounds(*_arms(tmp_path), OPTS, tmp_path, runs=2, warmup=1, on_round=lambda *a: None)
    assert events == ["start A", "healthy A", "start B", "healthy B", "stop B", "stop A"]


def test_stop_arms_stops_the_other_when_one_stop_raises(tmp_path, monkeypatch):
    stopped = []

    def stop(proc):
        stopped.append(proc)
        if proc == "B":
            raise OSError("stuck")
    monkeypatch.setattr(server_mod, "stop_server", stop)
    a, b = _arms(tmp_path)
    a.proc, b.proc = "A", "B"
    with pytest.raises(OSError):
        paired_mod.stop_arms([b, a])
    assert stopped == ["B", "A"]
    a.proc, b.proc = "A", None  # B never started: only A is stopped
    stopped.clear()
    paired_mod.stop_arms([b, a])
    assert stopped == ["A"]


def test_sigterm_becomes_system_exit_so_finally_stops_the_servers():
    before, ran = signal.getsignal(signal.SIGTERM), []
    with pytest.raises(SystemExit) as exc:
        with paired_mod.sigterm_runs_finally():
            try:
                os.kill(os.getpid(), signal.SIGTERM)  # what `timeout` sends
                time.sleep(5)
            finally:
                ran.append("finally")
    assert exc.value.code == 128 + signal.SIGTERM and ran == ["finally"]
    assert signal.getsignal(signal.SIGTERM) is before  # restored afterwards


def test_two_stand_in_servers_are_both_stopped_when_a_benchmark_raises(tmp_path, monkeypatch):
    port = free_port_pair()
    a = paired_mod.PairedArm("A", port, [sys.executable, "-c", STAND_IN, str(port)], {})
    b = paired_mod.PairedArm("B", port + 1, [sys.executable, "-c", STAND_IN, str(port + 1)], {})
    seen = []

    def bench(p, path, opts):  # the servers are real processes; only the benchmark is faked
        seen.append(path.stem)
        if path.stem == "bench-B-2":
            raise AstraError("benchmark timed out")
        return {"output_throughput": float(p)}
    monkeypatch.setattr(server_mod, "run_benchmark", bench)
    rounds = []
    with pytest.raises(AstraError, match="timed out"):
        paired_mod.run_rounds(a, b, {**OPTS, "port": port, "health_timeout": 20}, tmp_path, runs=3, warmup=0,
                              on_round=lambda new, all_rows: rounds.append(new))
    assert a.proc.poll() is not None and b.proc.poll() is not None  # neither server outlives the failure
    assert seen == ["bench-A-1", "bench-B-1", "bench-B-2"]
    assert (a.kv_tokens, b.kv_tokens) == (port, port + 1)  # read from each server's /server_info
    first = {r["arm"]: r["outputs"] for r in rounds[0]}
    assert first["A"][0][0] == port and first["B"][0][0] == port + 1  # each server probed on its own port


def _paired_rows(changes_pct, a_value=100.0, key="output_throughput"):
    rows = []
    for run, pct in enumerate(changes_pct, start=1):
        order = paired_mod.round_order(run)
        values = {"A": a_value, "B": a_value * (1 + pct / 100)}
        rows += [{"arm": arm, "run": run, "repeat": 1, "metrics": {key: values[arm]}, "outputs": None,
                  "paired": True, "order": order} for arm in order]
    return rows


def _change(changes, key="output_throughput", higher=True, licensed=False):
    return design_stats.change(_paired_rows(changes), key, "thr", "tok/s", higher, licensed)


def test_paired_change_is_a_t_interval_over_rounds_that_claims_nothing():
    changes = [5.0, 5.2, 4.8, 5.1, 4.9, 5.3, 4.7, 5.0]
    c = _change(changes)
    assert c.design == "paired" and c.units == 8 and c.better == 8
    assert c.typical_pct == pytest.approx(5.0)
    assert 4.7 < c.interval.lo < 5.0 < c.interval.hi < 5.3 and c.interval.df == 7
    assert not c.interval.controlled and c.verdict.startswith("uncontrolled, no claim")
    assert _change(changes, licensed=True).verdict.startswith("B better")
    assert _change(changes, higher=False, licensed=True).verdict.startswith("B worse")  # higher is worse for a latency


def test_paired_change_pure_noise_includes_zero():
    noise = [1.5, -2.0, 0.5, -1.0, 2.5, -0.5, 1.0, -1.5, 0.2, -2.2]
    c = _change(noise, licensed=True)
    assert c.interval.lo < 0 < c.interval.hi and c.better == 5
    assert c.verdict.startswith("no difference detected")


def test_paired_change_too_few_rounds_and_unpaired_rows():
    one = _change([5.0])
    assert one.interval is None and one.verdict == "no interval: 1 round(s): at least 2 needed"
    unpaired = [{**r, "paired": False} for r in _paired_rows([5.0, 5.0, 5.0])]
    assert design_stats.change(unpaired, "output_throughput", "t", "", True) is None
    half = _paired_rows([5.0, 5.0, 5.0])[:-1]  # round 3 lost its second arm: it is not a pair
    assert [r[0] for r in paired_stats.round_values(half, "output_throughput")] == [1, 2]


def test_a_passing_paired_aa_licenses_the_design(tmp_path):
    rows = [{**r, "control": True} for r in _paired_rows([0.5, -0.4, 0.3, -0.2, 0.1, -0.3, 0.2, -0.1])]
    (tmp_path / "ab.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert license.licensed_by(tmp_path, "paired")
    assert not license.licensed_by(tmp_path, "restarts")  # a paired A/A licenses the paired design only
    offset = [{**r, "control": True} for r in _paired_rows([-14.0, -13.0, -15.0, -14.5, -13.5, -14.2, -13.8, -14.1])]
    (tmp_path / "ab.jsonl").write_text("".join(json.dumps(r) + "\n" for r in offset))
    assert not license.licensed_by(tmp_path, "paired")  # the H100 A/A: -14% in every round
    assert not license.licensed_by(None, "paired")


def _fixture_rows():
    rows = []
    thr = [5.0, 4.6, 5.4, 5.1, 4.8, 5.2]
    ttft = [1.0, -3.0, 2.0, -0.5, 0.5, -1.5]
    for run, (t, f) in enumerate(zip(thr, ttft), start=1):
        order = paired_mod.round_order(run)
        for arm in order:
            b = arm == "B"
            rows.append({"arm": arm, "run": run, "repeat": 1, "ready_s": 40.0, "paired": True, "order": order,
                         "kv_tokens": 900 if not b else 800, "outputs": [[1, 2]] if run == 1 else None,
                         "metrics": {"output_throughput": 16000 * (1 + run / 100) * (1 + t / 100 if b else 1),
                                     "mean_ttft_ms": 500 * (1 + f / 100 if b else 1),
                                     "mean_itl_ms": 3.0 * (0.95 if b else 1)}})
    return rows


def test_paired_report_section(tmp_path):
    text = report.render(_fixture_rows(), [])
    assert "6 paired round(s)" in text and "## Paired rounds: B vs A within each round" in text
    assert "| 2 | BA |" in text and "| 1 | AB |" in text
    assert ("| output throughput (tok/s, higher is better) | +5.05% | [+4.72, +5.32]% (95% t-interval over rounds, "
            "6 rounds, 5 df; start-to-start variance not included) | 6 of 6 rounds | uncontrolled, no claim") in text
    assert "| mean TTFT (ms, lower is better) | +0.00% | [-2.15, +1.66]%" in text
    licensed = report.render(_fixture_rows(), [], licensed=True)
    assert "| 6 of 6 rounds | B better: [+4.72, +5.32]% excludes 0 |" in licensed
    assert "| 3 of 6 rounds | no difference detected: [-2.15, +1.66]% includes 0 |" in licensed
    assert "KV pool: A 900 tokens, B 800 tokens — they differ" in text
    assert "| output throughput (tok/s) |" in text  # the unpaired table is still there
    plain = report.render([{**r, "paired": False} for r in _fixture_rows()], [])
    assert "Paired rounds" not in plain and "6 run(s) per arm" in plain
    path = report.write_report(tmp_path, _fixture_rows(), [])
    assert "Paired rounds" in path.read_text()
    assert (tmp_path / "ab.png").exists() or "matplotlib" in path.read_text()


@pytest.fixture
def cli(tmp_path, monkeypatch, fake):
    """ab's CLI with the fakes above and a fake patched_server; returns (invoke, events, reports)."""
    reports = []
    monkeypatch.setattr(ab_mod, "sglang_available", lambda: True)
    def patched(patches, stats_dir=None, no_build=False, server_args=(), **k):
        return {"ASTRA_SGLANG_PATCHES": "p", "PATH": "/bin"}, ["python", "-m", "sglang", *server_args], "ok"
    monkeypatch.setattr(ab_mod, "patched_server", patched)
    monkeypatch.setattr(paired_mod, "patched_server", patched)
    monkeypatch.setattr(report, "write_report", lambda out, rows, dirs, licensed=False, min_window_s=10.0:
                        reports.append((len(rows), [str(d) for d in dirs])) or out / "ab.md")
    invoke = lambda *args: CliRunner().invoke(ab_command, ["--model-path", "m", "--port", "31000",  # noqa: E731
                                                          "--out", str(tmp_path / "o"), *map(str, args)])
    return invoke, fake[0], reports


def test_cli_paired_end_to_end(tmp_path, cli, monkeypatch):
    invoke, events, reports = cli
    starts = []
    monkeypatch.setattr(server_mod, "start_server", lambda argv, env, log: starts.append((argv, env)) or
                        {"31000": "A", "31001": "B"}[argv[argv.index("--port") + 1]])
    res = invoke("--paired", "--runs", "4", "--warmup", "1", "--", "--mem-fraction-static", "0.4",
                 "--max-total-tokens", "1000", "--sleep-on-idle")
    assert res.exit_code == 0, res.output
    assert "warning" not in res.stderr
    (argv_a, env_a), (argv_b, env_b) = starts
    assert argv_a[argv_a.index("--port") + 1] == "31000" and argv_b[argv_b.index("--port") + 1] == "31001"
    assert "--sleep-on-idle" in argv_a and "--sleep-on-idle" in argv_b  # server args reach both servers
    assert not any(k.startswith("ASTRA_SGLANG_") for k in env_a)  # A is unpatched
    assert env_b["ASTRA_SGLANG_PATCHES"] == "p" and env_b[ENV_STATS_INTERVAL] == str(server_mod.STATS_INTERVAL_S)
    stats = str(tmp_path / "o" / "stats" / "B-paired")
    assert reports == [(2, [stats]), (4, [stats]), (6, [stats]), (8, [stats]), (8, [stats])]  # per round + final
    rows = [json.loads(line) for line in (tmp_path / "o" / "ab.jsonl").read_text().splitlines()]
    assert [(r["arm"], r["run"], r["order"]) for r in rows] == [
        ("A", 1, "AB"), ("B", 1, "AB"), ("B", 2, "BA"), ("A", 2, "BA"),
        ("A", 3, "AB"), ("B", 3, "AB"), ("B", 4, "BA"), ("A", 4, "BA")]
    assert all(r["paired"] and r["repeat"] == 1 for r in rows)
    assert sum(e.startswith("bench bench-warmup") for e in events) == 2
    client = json.loads((tmp_path / "o" / report.CLIENT).read_text())  # the pinned client, for the report
    assert client["num_prompts"] == 512 and client["seed"] == 1 and client["flush_cache"]


def test_cli_paired_warnings_and_usage_errors(cli):
    invoke, events, _ = cli
    res = invoke("--paired", "--runs", "1")
    assert res.exit_code == 0, res.output
    assert "--mem-fraction-static 0.4" in res.stderr and "--max-total-tokens" in res.stderr
    res = invoke("--paired", "--port", "65535")
    assert res.exit_code == 2 and "65535" in res.output  # B listens on the next port
    res = invoke("--paired", "--", "--port", "1")  # ab's own options are still refused after --
    assert res.exit_code == 1 and "ab's own options" in res.output
    help_text = CliRunner().invoke(ab_command, ["--help"]).output
    assert "--paired" in help_text and "--sleep-on-idle" in help_text and "--mem-fraction-static" in help_text


def test_rounds_stop_once_enough_and_record_gpu_state(tmp_path, fake, monkeypatch):
    readings = iter(range(100))
    monkeypatch.setattr(paired_mod.noise, "gpu_state", lambda: {"sm_mhz": 1980.0 - next(readings)})
    rows = paired_mod.run_rounds(*_arms(tmp_path), OPTS, tmp_path, runs=10, warmup=0, on_round=lambda *a: None,
                                 enough=lambda rows: len(rows) >= 6)
    assert [r["run"] for r in rows] == [1, 1, 2, 2, 3, 3]  # stopped after round 3 of up to 10
    assert rows[0]["gpu"] == {"before": {"sm_mhz": 1980.0}, "after": {"sm_mhz": 1979.0}}
    assert not any(r["control"] for r in rows)


def test_cli_control_starts_b_unpatched_and_says_a_a(tmp_path, cli, monkeypatch):
    invoke, _, _ = cli
    starts = []
    monkeypatch.setattr(server_mod, "start_server", lambda argv, env, log: starts.append((argv, env)) or
                        {"31000": "A", "31001": "B"}[argv[argv.index("--port") + 1]])
    monkeypatch.setattr(paired_mod, "patched_server", lambda *a, **k: pytest.fail("the control builds no patches"))
    monkeypatch.setattr(ab_mod, "patched_server", lambda *a, **k: pytest.fail("the control builds no patches"))
    res = invoke("--paired", "--control", "--runs", "3", "--warmup", "0", "--seed", "7", "--",
                 "--mem-fraction-static", "0.4", "--max-total-tokens", "1000")
    assert res.exit_code == 0, res.output
    (argv_a, env_a), (argv_b, env_b) = starts
    assert argv_a[:3] == argv_b[:3] and not any(k.startswith("ASTRA_SGLANG_") for k in {**env_a, **env_b})
    rows = [json.loads(line) for line in (tmp_path / "o" / "ab.jsonl").read_text().splitlines()]
    assert all(r["control"] for r in rows) and "stats_dir" not in rows[0]
    text = report.render(rows, [])
    assert text.startswith("# Serving A/A control") and "Engagement of the patched server" not in text


def test_cli_width_and_b_first_need_paired(cli):
    invoke, _, _ = cli
    for flag in (["--b-first"], ["--target-width", "1"]):
        res = invoke(*flag)
        assert res.exit_code == 2 and "go with --design paired" in res.output


def test_bench_command_passes_the_seed():
    argv = server_mod.bench_command("m", 1, "o.jsonl", seed=7, python="py")
    assert argv[argv.index("--seed") + 1] == "7"


def test_report_shows_gpu_clocks_and_throttled_benchmarks():
    rows = _fixture_rows()
    for i, row in enumerate(rows):
        reasons = 0x4 if i == 3 else 0x1
        row["gpu"] = {"before": {"sm_mhz": 1980.0 - i, "mem_mhz": 2619.0, "temp_c": 40.0 + i, "power_w": 300.0,
                                 "reasons": reasons}, "after": None}
    text = report.render(rows, [])
    assert "GPU state (nvidia-smi before and after each benchmark):" in text
    # rows alternate A B, B A, ...: A holds rows 0, 3, 4, 7, 8, 11 (row 3 power-capped), B the others
    assert "- A: SM clock 1969–1980 MHz, up to 51 °C; 1 of 6 benchmarks" in text and "compare those rounds" in text
    assert "- B: SM clock 1970–1979 MHz, up to 50 °C; 0 of 6 benchmarks" in text
