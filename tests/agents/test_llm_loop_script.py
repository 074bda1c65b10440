"""benchmarks/gpu/sglang_llm_loop.sh on the CPU: the fake server in SGLang's place (no chat template, noise for
answers, /health and /v1/models), the stand-in evaluator in the harness's (tests/agents/standin_cli.py), and short
calls. Two calls of the script: the first starts the job of two ops, the second resumes it with a deadline of its
own (--resume with --config); each call's rounds end at their deadline within the call's time, every LLM call has
a priced cost line, and result.txt (benchmarks/llm_loop_result.py) counts each call's seconds of rounds."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI, Server

from astra_sglang.optimize.agents.journal import RunLog

REPO = Path(__file__).resolve().parents[2]
NOISE = " ".join(["lorem", "ipsum", "dolor"] * 300)


def call(out: Path, job: Path, port: int, home: Path) -> tuple[subprocess.CompletedProcess, float]:
    env = {**os.environ, "SETUP": "/dev/null", "PORT": str(port), "JOB": str(job), "CALL_S": "30", "PREP_S": "8",
           "RESUME_S": "12", "TAIL_S": "6", "MIN_ROUNDS_S": "5",
           "ASTRA": f"{sys.executable} tests/agents/standin_cli.py",
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           "ASTRA_SGLANG_HOME": str(home), "CUDA_VISIBLE_DEVICES": ""}
    began = time.time()
    done = subprocess.run(["bash", "benchmarks/gpu/sglang_llm_loop.sh", str(out)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done, time.time() - began


@pytest.mark.skipif(not all(shutil.which(t) for t in ("bash", "curl", "timeout")), reason="needs bash, curl, timeout")
def test_two_calls_of_the_script_resume_the_job_within_their_time(tmp_path):
    job, out = tmp_path / "job", tmp_path / "out"
    with FakeOpenAI(lambda body: NOISE, Server(chat_template=False, context_len=20000)) as server:
        port = int(server.base_url.rsplit(":", 1)[1].split("/")[0])
        first, first_s = call(out, job, port, tmp_path / "home")
        second, second_s = call(out, job, port, tmp_path / "home")
    assert "server already up (part 1)" in first.stdout and "server already up (part 2)" in second.stdout
    assert first_s < 30 and second_s < 30  # CALL_S, the server's wait and the outputs included
    assert [line.split()[0] for line in (job / "parts.txt").read_text().splitlines()] == ["1", "2"]
    for op in ("silu_and_mul", "rmsnorm"):
        stops = [r.summary for r in RunLog(job / op).of_role("stop")]
        assert stops == ["time is up: the rounds' deadline passed"] * 2
        saved = json.loads((job / op / "config.json").read_text())
        wanted = int(re.search(r"part 2: (\d+) s of rounds", second.stdout).group(1))
        assert saved["deadline_s"] == wanted and saved["plateau"] == 0  # the second call's own settings
        calls = (out / f"{op}-llm.log").read_text().splitlines()
        assert calls and all(" completions" in c and " dummy " in c and "(unpriced model)" not in c for c in calls)
    result = (out / "result.txt").read_text()
    assert re.fullmatch(r"calls: part 1 \d+ s, exit code 0; part 2 \d+ s, exit code 0", result.splitlines()[0])
    assert "tracebacks in optimize's output: 0" in result
    for op in ("silu_and_mul", "rmsnorm"):
        line = next(x for x in result.splitlines() if x.startswith(f"{op}:"))
        spans = [int(s) for s in re.findall(r"part \d (\d+) s", line)]
        assert len(spans) == 2 and all(s > 0 for s in spans) and "no stop record" not in line, line
    assert "verdict: NOT YET" in result  # seconds of rounds here, not the GPU run's 10 minutes
    assert (out / "job.md").is_file() and (out / "optimize.log").is_file()


def test_the_result_counts_rounds_from_the_start_or_the_resumed_calls_first_step(tmp_path, bench_script, capsys):
    """Part 1's rounds start when round 0 closes (not at the call's start: the server and the baselines come
    first), a resumed call's at its first step (not its start-up); each ends at its stop record. 10 minutes of
    rounds on every op, every call exit 0 and no traceback: PASS."""
    import datetime as dt

    from astra_sglang.optimize.records import LogRecord

    result = bench_script("llm_loop_result")
    t0 = 1_800_000_000.0

    def at(s: float) -> str:
        return dt.datetime.fromtimestamp(t0 + s, dt.timezone.utc).isoformat(timespec="seconds")

    job = tmp_path / "job"
    for op in ("silu_and_mul", "rmsnorm"):
        log = RunLog(job / op)
        for s, role, rnd in ((150, "round", 0), (160, "plan", 1), (400, "stop", 1), (560, "plan", 9),
                             (960, "stop", 9)):
            log.append(LogRecord(round=rnd, role=role, time=at(s), summary="time is up" if role == "stop" else ""))
    (job / "parts.txt").write_text(f"1 {t0:.0f} {t0 + 450:.0f} 0\n2 {t0 + 500:.0f} {t0 + 1000:.0f} 0\n")
    (job / "optimize-1.log").write_text("r01 ...\n")
    result.main([str(job)])
    out = capsys.readouterr().out
    assert "rounds part 1 250 s, part 2 400 s: 10.8 minutes" in out and "verdict: PASS" in out
    (job / "optimize-2.log").write_text("Traceback (most recent call last):\n")
    result.main([str(job)])
    assert "tracebacks in optimize's output: 1" in (out := capsys.readouterr().out) and "verdict: NOT YET" in out
