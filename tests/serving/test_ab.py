"""`astra-sglang ab` on CPU: command construction, benchmark-line parsing, the report from synthetic rows,
server lifecycle against a stand-in HTTP server, and CLI errors."""
from __future__ import annotations

import json
import sys

import pytest
from click.testing import CliRunner
from stand_in import SERVER as STAND_IN, free_port

from astra_sglang.cli.ab import ab as ab_command
from astra_sglang.errors import AstraError
from astra_sglang.patching.stats import OpRecord, ProcessStats
from astra_sglang.serving import ab as ab_mod
from astra_sglang.serving import server as server_mod
from astra_sglang.serving import report

BENCH_LINE = json.dumps({
    "backend": "sglang", "dataset_name": "random-ids", "completed": 512, "duration": 8.1,
    "request_throughput": 63.2, "input_throughput": 64716.8, "output_throughput": 16179.2,
    "mean_ttft_ms": 512.5, "median_ttft_ms": 480.0, "p99_ttft_ms": 1200.0, "mean_tpot_ms": 2.9,
    "median_tpot_ms": 2.8, "p99_tpot_ms": 4.0, "mean_itl_ms": 2.95, "median_itl_ms": 2.7, "p99_itl_ms": 9.1,
    "mean_e2e_latency_ms": 1250.0, "std_ttft_ms": 10.0, "tokenizer_id": "m"})


def test_server_command_loopback_and_extra():
    argv = server_mod.server_command("m", 31000, "dummy", ["--attention-backend", "triton"], python="py")
    assert argv == ["py", "-m", "sglang.launch_server", "--model-path", "m", "--load-format", "dummy",
                    "--host", "127.0.0.1", "--port", "31000", "--attention-backend", "triton"]
    assert "--load-format" not in server_mod.server_command("m", 1, None, python="py")


def test_bench_command():
    argv = server_mod.bench_command("m", 31000, "out/b.jsonl", 100, 512, 64, 8, python="py")
    assert argv[:3] == ["py", "-m", "sglang.benchmark.serving"]
    assert "--disable-tqdm" in argv
    pairs = {f: argv[i + 1] for i, f in enumerate(argv[:-1]) if f.startswith("--") and f != "--disable-tqdm"}
    assert pairs["--backend"] == "sglang" and pairs["--dataset-name"] == "random-ids"
    assert pairs["--host"] == "127.0.0.1" and pairs["--port"] == "31000"
    assert pairs["--num-prompts"] == "100" and pairs["--random-input-len"] == "512"
    assert pairs["--random-output-len"] == "64" and pairs["--max-concurrency"] == "8"
    assert pairs["--output-file"] == "out/b.jsonl" and pairs["--tokenizer"] == "m"


def test_probe_payload_greedy():
    body = server_mod.probe_payload(0)
    assert body["sampling_params"] == {"temperature": 0, "max_new_tokens": 32} and body["text"]
    ids = server_mod.probe_payload(1, skip_tokenizer=True)
    assert "text" not in ids and ids["input_ids"] == server_mod.probe_payload(1, skip_tokenizer=True)["input_ids"]


def test_parse_bench_line(tmp_path):
    m = server_mod.parse_bench_line(BENCH_LINE)
    assert m["output_throughput"] == 16179.2 and m["mean_ttft_ms"] == 512.5 and m["mean_itl_ms"] == 2.95
    assert "tokenizer_id" not in m and "std_ttft_ms" not in m
    f = tmp_path / "b.jsonl"
    f.write_text('{"output_throughput": 1.0}\n' + BENCH_LINE + "\n")
    assert server_mod.read_bench(f)["output_throughput"] == 16179.2  # the last (appended) line
    with pytest.raises(AstraError):
        server_mod.parse_bench_line('{"backend": "sglang"}')
    with pytest.raises(AstraError):
        server_mod.parse_bench_line("not json")
    with pytest.raises(AstraError):
        server_mod.read_bench(tmp_path / "missing.jsonl")


def _row(arm, run, thr, ttft, itl, outputs):
    return {"arm": arm, "run": run, "metrics": {"output_throughput": thr, "mean_ttft_ms": ttft, "mean_itl_ms": itl},
            "outputs": outputs}


def test_report_noise_and_parity(tmp_path):
    same, other = [[1, 2], [3, 4], [5, 6]], [[1, 2], [3, 9], [5, 6]]
    rows = [_row("A", 1, 100.0, 50.0, 3.0, same), _row("B", 1, 101.0, 40.0, 2.5, same),
            _row("A", 2, 102.0, 51.0, 3.1, same), _row("B", 2, 99.0, 41.0, 2.6, other),
            _row("A", 3, 98.0, 52.0, 3.0, same), _row("B", 3, 100.5, 40.5, 2.55, same)]
    comp = {c["key"]: c for c in report.compare(rows)}
    thr = comp["output_throughput"]
    assert thr["a_median"] == 100.0 and thr["b_median"] == 100.5 and thr["delta_pct"] == pytest.approx(0.5)
    assert thr["overlap"] and "smaller than the run-to-run noise" in thr["verdict"]
    assert not comp["mean_ttft_ms"]["overlap"] and "B is better" in comp["mean_ttft_ms"]["verdict"]
    assert comp["mean_ttft_ms"]["delta_pct"] == pytest.approx((40.5 - 51) / 51 * 100)
    par = report.parity(rows)
    assert par["prompts"] == 3 and par["b_differ"] == 1 and par["a_differ"] == 0 and not par["identical"]

    stats = tmp_path / "stats" / "B-1"
    stats.mkdir(parents=True)
    for pid, calls in ((11, 5), (12, 7)):
        proc = ProcessStats(pid=pid, host="h", argv=[], mechanism="plugin", started=0, updated=0,
                            ops={"rmsnorm": OpRecord(op="rmsnorm", calls=calls, kernel_calls=calls),
                                 "silu_and_mul": OpRecord(op="silu_and_mul")})
        (stats / f"astra-h-{pid}.json").write_text(proc.model_dump_json())
    ops = {o["op"]: o for o in report.engagement([stats])}
    assert ops["rmsnorm"]["calls"] == 12 and ops["rmsnorm"]["status"] == "engaged"
    assert ops["silu_and_mul"]["status"] == "not engaged"

    path = report.write_report(tmp_path, rows, [stats])
    text = path.read_text()
    assert "smaller than the run-to-run noise" in text and "1 of 3 prompts differ" in text
    assert "| rmsnorm | 12 | 12 | 0 | 0 | engaged |" in text and "+0.50%" in text
    assert (tmp_path / "ab.png").exists() or "matplotlib" in text


def test_report_single_run_and_identical(tmp_path):
    rows = [_row("A", 1, 100.0, 50.0, 3.0, ["x"]), _row("B", 1, 110.0, 45.0, 2.8, ["x"])]
    text = report.render(rows, [])
    assert "no noise estimate" in text and "identical on all 1 prompts" in text and "+10.00%" in text
    assert "no op was engaged" in text


def test_server_lifecycle_with_stand_in(tmp_path):
    port = free_port()
    log = tmp_path / "server.log"
    proc = server_mod.start_server([sys.executable, "-c", STAND_IN, str(port)], {}, log)
    try:
        server_mod.wait_healthy(proc, port, log, timeout_s=20)
        outputs = server_mod.parity_probe(port, skip_tokenizer=False)
        assert outputs == [[port, len(p)] for p in server_mod.PROBE_PROMPTS]
    finally:
        server_mod.stop_server(proc, grace_s=5)
    assert proc.poll() is not None


def test_dying_server_reports_log_tail(tmp_path):
    log = tmp_path / "server.log"
    proc = server_mod.start_server([sys.executable, "-c", "print('boom: no GPU'); raise SystemExit(3)"], {}, log)
    with pytest.raises(AstraError, match="boom: no GPU"):
        server_mod.wait_healthy(proc, free_port(), log, timeout_s=20)


def test_strip_patch_env():
    env = server_mod.strip_patch_env({"ASTRA_SGLANG_PATCHES": "p", "PATH": "/bin"})
    assert env == {"PATH": "/bin"}


def test_cli_errors(tmp_path, monkeypatch):
    run = lambda *args: CliRunner().invoke(ab_command, [str(a) for a in args])  # noqa: E731
    assert run().exit_code == 2 and "--model-path" in run().output
    assert run("--model-path", "m", "--runs", "0").exit_code == 2
    monkeypatch.setattr(ab_mod, "sglang_available", lambda: False)
    res = run("--model-path", "m", "--out", tmp_path / "o")
    assert res.exit_code == 1 and "sglang is not importable" in res.output
    monkeypatch.setattr(ab_mod, "sglang_available", lambda: True)
    res = run("--model-path", "m", "--out", tmp_path / "o", "--", "--port", "1")
    assert res.exit_code == 1 and "--port" in res.output and "ab's own options" in res.output
    empty = tmp_path / "patches"
    empty.mkdir()
    res = run("--model-path", "m", "--patches", empty, "--out", tmp_path / "o")
    assert res.exit_code == 1 and "no enabled patches" in res.output
    assert "Examples" in CliRunner().invoke(ab_command, ["--help"]).output


def test_bench_command_shared_prefix():
    argv = server_mod.bench_command("m", 31000, "b.jsonl", 512, 256, 128, 64, python="py", dataset="shared-prefix",
                                prefix_len=2048, groups=16)
    pairs = {f: argv[i + 1] for i, f in enumerate(argv[:-1]) if f.startswith("--") and f != "--disable-tqdm"}
    assert pairs["--dataset-name"] == "generated-shared-prefix"
    assert pairs["--gsp-num-groups"] == "16" and pairs["--gsp-prompts-per-group"] == "32"
    assert pairs["--gsp-system-prompt-len"] == "2048" and pairs["--gsp-question-len"] == "256"
    assert pairs["--gsp-output-len"] == "128" and "--random-input-len" not in argv


def test_engagement_counts_calls_deferred_to_the_original(tmp_path):
    from astra_sglang.patching.stats import StatsWriter
    from astra_sglang.serving.report import engagement

    writer = StatsWriter(tmp_path, "plugin", interval_s=0)
    silu, merge = writer.op("silu_and_mul"), writer.op("merge_state")
    silu.calls, silu.kernel_calls, silu.deferred = 10, 6, 4
    merge.calls, merge.deferred = 3, 3
    writer.write()
    ops = {o["op"]: o for o in engagement([tmp_path])}
    assert (ops["silu_and_mul"]["deferred"], ops["silu_and_mul"]["status"]) == (4, "engaged")
    assert (ops["merge_state"]["deferred"], ops["merge_state"]["status"]) == (3, "called, all deferred")
