"""The minimum timed window on the rounds an H200 really ran (tests/fixtures/serving/h200-aa-short-rounds.json: the
crossover A/A of 2026-11-27, commit 45b7284, 64 prompts x 128 out at 32 concurrent, windows of 0.51-1.13 s): the
window read from the benchmark's own line, the TTFT share, the flag in the report and on the console, and the A/A
rule failing for it, through `ab` itself (CliRunner) and on the paired design's report."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from astra_sglang.cli.ab import ab as ab_command
from astra_sglang.serving import ab as ab_mod
from astra_sglang.serving import design_stats, report, runner, server, summary, window
from astra_sglang.serving.bench_clients import ClientPool
from astra_sglang.serving.client import ClientSettings

FIXTURE = json.loads((Path(__file__).parents[1] / "fixtures" / "serving" / "h200-aa-short-rounds.json").read_text())
ROWS = FIXTURE["rows"]
REASON = "rounds of 0.5-1.1 s: below the 10 s window; ramp-up and tail dominate"


def test_the_window_is_the_benchmarks_own_duration_kept_in_the_row_metrics():
    metrics = server.parse_bench_line(json.dumps(FIXTURE["bench_line"]))
    assert metrics["duration"] == pytest.approx(1.0208919170000286)
    assert metrics == pytest.approx(ROWS[0]["metrics"])  # what ab.jsonl kept of that round: the same figures
    w = window.windows([{"period": 1, "round": 1, "arm": "A", "metrics": metrics}])[0]
    assert (w.period, w.round, w.arm) == (1, 1, "A")
    assert w.ttft_share == pytest.approx(0.1810, abs=1e-4)  # 184.8 ms of 1.02 s


def test_windows_and_ttft_shares_of_the_h200_rounds():
    found = window.windows(ROWS)
    assert [round(w.window_s, 2) for w in found] == [1.02, 1.13, 0.75, 0.63, 0.51, 0.81]
    assert [round(100 * w.ttft_share) for w in found] == [18, 20, 8, 9, 9, 18]
    assert all(w.short(window.MIN_WINDOW_S) for w in found)


@pytest.mark.parametrize("min_s, reason", [
    (10.0, REASON),
    (1.0, "4 of 6 rounds of 0.5-0.8 s: below the 1 s window; ramp-up and tail dominate"),
    (0.6, "1 of 6 rounds of 0.5 s: below the 0.6 s window; ramp-up and tail dominate"),
    (0.5, ""),
    (0.0, ""),
])
def test_short_reason_names_the_short_rounds_and_their_span(min_s, reason):
    assert window.short_reason(window.windows(ROWS), min_s) == reason


def test_a_row_without_a_duration_is_not_judged():
    w = window.windows([{"run": 3, "arm": "B", "metrics": {"output_throughput": 1.0}}])[0]
    assert (w.period, w.round, w.window_s, w.ttft_share) == (None, 3, None, None) and not w.short(10.0)
    assert window.short_reason([w]) == ""
    assert window.describe(w) == "no timed window in the benchmark's output"


def test_describe_says_the_window_and_its_ttft_share():
    a1, _, _, _, a3, _ = window.windows(ROWS)
    assert window.describe(a1) == "timed 1.02 s, TTFT 18% of it (43% of a request), below the 10 s window"
    assert window.describe(a3, 0.5) == "timed 0.51 s, TTFT 9% of it (19% of a request)"


def test_one_request_at_a_time_the_first_tokens_share_is_the_requests_not_the_windows():
    """A round of the Mixtral-shaped A/B (H200, 2026-11-28: 24 requests one at a time, 128 out): its mean TTFT is
    0.3% of the window, yet every request waits for its own first token, 7% of each request's latency."""
    w = window.windows([{"period": 1, "round": 1, "arm": "A", "metrics": {
        "duration": 17.00754127700003, "mean_ttft_ms": 52.341176249996124, "mean_e2e_latency_ms": 707.8057157500032,
        "completed": 24.0}}])[0]
    assert round(100 * w.ttft_share) == 0 and w.request_share == pytest.approx(0.0739, abs=1e-4)
    assert 24 * 707.8057157500032 / 1000 == pytest.approx(w.window_s, rel=2e-3)  # back to back: the window
    assert window.describe(w) == "timed 17.01 s, TTFT 0% of it (7% of a request)"


def test_the_aa_rule_fails_for_short_windows_alone():
    """A made-up A/A that passes every other part of the rule fails on its windows."""
    rows = [{**row, "period": p, "metrics": {**row["metrics"], "output_throughput": 1000.0 * (1 + e)}}
            for p, e in zip(range(1, 6), (0.002, -0.003, 0.001, -0.001, 0.0015)) for row in
            ({"design": "crossover", "round": r, "arm": arm, "gpu_index": (p + (arm == "B")) % 2,
              "metrics": {"duration": 20.0}} for r in (1, 2) for arm in "AB")]
    for row in rows:  # B's value differs from A's by the period's e
        if row["arm"] == "A":
            row["metrics"]["output_throughput"] = 1000.0
    change = design_stats.change(rows, "output_throughput", "output throughput", "tok/s", True)
    assert design_stats.aa_check(change).ok
    check = design_stats.aa_check(change, short_windows=REASON)
    assert not check.ok and check.reasons == [REASON]


RECORDED = {f"bench-{r['arm']}-p{r['period']}-r{r['round']}": r["metrics"] for r in ROWS}


def _recorded_run(settings, model_path, port, bench_file, timeout_s=900.0):
    """The client replaced by the rounds the H200 ran: bench-<arm>-p1-r<k> answers that row's metrics."""
    return RECORDED[bench_file.stem.replace("warmup", "r1")]


@pytest.fixture
def recorded(monkeypatch):
    monkeypatch.setattr(ab_mod, "sglang_available", lambda: True)
    monkeypatch.setattr(server, "start_server", lambda argv, env, log: argv[0])
    monkeypatch.setattr(server, "wait_healthy", lambda proc, port, log, timeout, since=None: 50.0)
    monkeypatch.setattr(server, "stop_server", lambda proc: None)
    monkeypatch.setattr(server, "server_info", lambda port: {"max_total_num_tokens": 4006978})
    monkeypatch.setattr(server, "post_generate", lambda port, body: {"meta_info": {
        "output_token_logprobs": [[-1.0, 5, None]] * 2,
        "output_top_logprobs": [[[-1.0, 5, None], [-2.0, 6, None]]] * 2}})
    monkeypatch.setattr(ClientSettings, "run", _recorded_run)
    monkeypatch.setattr(ClientPool, "IN_PROCESS", False)  # every round through the replaced ClientSettings.run
    monkeypatch.setattr(runner.time, "sleep", lambda s: None)


def _aa(out: Path, *extra: str):
    return CliRunner().invoke(ab_command, ["--model-path", "m", "--design", "crossover", "--gpus", "0,1", "--control",
                                          "--runs", "1", "--rounds", "3", "--port", "31000", "--num-prompts", "64",
                                          "--input-len", "128", "--output-len", "128", "--concurrency", "32",
                                          "--out", str(out), *extra])


def test_ab_flags_the_h200_rounds_and_the_aa_rule_fails_for_them(tmp_path, recorded):
    res = _aa(tmp_path / "aa")
    assert res.exit_code == 0, res.output
    assert ("[p1 r1 A] output 8024.4 tok/s, ITL 1.95 ms; timed 1.02 s, TTFT 18% of it (43% of a request), below "
            "the 10 s window" in res.output)
    assert f"warning: {REASON}" in res.output
    s = summary.RunSummary.model_validate_json((tmp_path / "aa" / summary.SUMMARY).read_text())
    assert s.short_windows == REASON and s.min_window_s == 10.0 and s.aa_ok is False
    assert s.aa_reasons[0] == REASON and "3 rounds < 8" in s.aa_reasons
    assert [(w.round, w.arm, round(w.window_s, 2), w.short) for w in s.windows][:2] == [(1, "A", 1.02, True),
                                                                                          (1, "B", 1.13, True)]
    rows = runner.read_jsonl(tmp_path / "aa" / runner.ROWS)
    assert [r["metrics"]["duration"] for r in rows] == [r["metrics"]["duration"] for r in ROWS]  # kept in ab.jsonl
    text = (tmp_path / "aa" / report.REPORT).read_text()
    assert f"each round's under \"Rounds\" below):\n{REASON}." in text
    assert "| 1 | 1 | A | 1.02 s | 185 ms | 18% | 43% | short |" in text
    assert "| 1 | 3 | A | 0.51 s | 47 ms | 9% | 19% | short |" in text
    assert f"**fail**: {REASON}; 3 rounds < 8" in text


def test_a_lower_min_window_lets_the_same_rounds_through(tmp_path, recorded):
    res = _aa(tmp_path / "aa", "--min-window", "0.5")
    assert res.exit_code == 0, res.output
    assert "below the" not in res.output and "warning:" not in res.output
    s = summary.RunSummary.model_validate_json((tmp_path / "aa" / summary.SUMMARY).read_text())
    assert s.short_windows == "" and not any(w.short for w in s.windows)
    assert not any("window" in r for r in s.aa_reasons)  # it still fails, on the rest of the rule
    text = (tmp_path / "aa" / report.REPORT).read_text()
    assert "Rounds too short" not in text and "| 1 | 3 | A | 0.51 s | 47 ms | 9% | 19% |  |" in text


def test_the_paired_report_shows_each_rounds_windows_and_flags_short_ones():
    rows = [{**row, "paired": True, "run": row["round"], "order": "AB"} for row in ROWS]
    for row in rows:
        del row["design"], row["period"]
    text = report.render(rows, [])
    assert "| 1 | AB |" in text and "| 1.02 s / 1.13 s |" in text and "| 0.51 s / 0.81 s |" in text
    assert f"per round under \"Paired rounds\"):\n{REASON}." in text
    assert "Rounds too short" not in report.render(rows, [], min_window_s=0.5)


def test_the_aa_rule_fails_an_interval_of_too_few_periods():
    """Four crossover periods (2 df) give an interval that holds 0 whatever the noise: the A/A cannot pass on it,
    however small its differences; a fifth period (3 df) can."""
    def rows(errors):
        out = [{"design": "crossover", "period": p, "round": r, "arm": arm, "gpu_index": (p + (arm == "B")) % 2,
                "metrics": {"duration": 20.0, "output_throughput": 1000.0 * (1 + (e if arm == "B" else 0.0))}}
               for p, e in zip(range(1, len(errors) + 1), errors) for r in (1, 2) for arm in "AB"]
        return design_stats.change(out, "output_throughput", "output throughput", "tok/s", True)

    check = design_stats.aa_check(rows((0.002, -0.003, 0.001, -0.001)))
    assert not check.ok and len(check.reasons) == 1 and check.reasons[0].startswith("2 degrees of freedom < 3")
    assert design_stats.aa_check(rows((0.002, -0.003, 0.001, -0.001, 0.0015))).ok
