"""What benchmarks/gpu/sglang_llm_loop.sh's job did, one line per op and a verdict, from the job folder alone.

Per op: the rounds planned, the candidates by status, the LLM calls (on /v1/completions, with a cost), the stop
reasons, and the seconds of rounds in each call of the script: from the call's first step after the start was
closed (round 0; a resumed call's start-up is not counted) to the call's stop record (the rounds' deadline); a
call with no stop record counts to its end and is flagged. parts.txt holds one line per call: PART BEGIN END RC.

Usage: python3 benchmarks/llm_loop_result.py JOB_DIR [OP ...]   (default ops: silu_and_mul rmsnorm)
"""
from __future__ import annotations

import datetime as dt
import sys
from collections import Counter
from pathlib import Path

from pydantic import BaseModel

from astra_sglang.optimize.agents.journal import RunLog
from astra_sglang.optimize.records import LogRecord

OPS = ("silu_and_mul", "rmsnorm")
MINUTES = 10.0
"""Minutes of rounds each op's run should have gone through over the calls."""


class Part(BaseModel):
    part: int
    began: float
    ended: float
    rc: int


def parts(job: Path) -> list[Part]:
    rows = [line.split() for line in (job / "parts.txt").read_text().splitlines() if line.strip()]
    return [Part(part=int(p), began=float(b), ended=float(e), rc=int(rc)) for p, b, e, rc in rows]


def stamp(record: LogRecord) -> float:
    return dt.datetime.fromisoformat(record.time).timestamp()


def rounds_seconds(log: RunLog, part: Part) -> tuple[float, bool]:
    """(seconds of rounds in this call, whether the call's rounds ended with a stop record)."""
    opened = max(next((stamp(r) for r in log.of_role("round") if r.round == 0), part.began), part.began)
    # the first step of the call at or after the start's close: a resumed run's rounds, not its start-up
    start = min((stamp(r) for r in log.records if opened <= stamp(r) <= part.ended + 1), default=opened)
    stops = [stamp(r) for r in log.of_role("stop") if part.began - 1 <= stamp(r) <= part.ended + 1]
    end = max(stops) if stops else part.ended
    return max(end - start, 0.0), bool(stops)


def op_line(job: Path, op: str, calls: list[Part]) -> tuple[str, float]:
    log = RunLog(job / op)
    plans = sorted({r.round for r in log.of_role("plan")})
    cands = Counter(r.payload["status"] for r in log.of_role("cand"))
    costs = (job / op / "llm.log").read_text().splitlines() if (job / op / "llm.log").is_file() else []
    priced = sum("$0.00000;" not in c and " $" in c for c in costs)
    spans = [rounds_seconds(log, p) for p in calls]
    total = sum(s for s, _ in spans)
    per = ", ".join(f"part {p.part} {s:.0f} s" + ("" if clean else " (no stop record)") for p, (s, clean)
                    in zip(calls, spans))
    stops = [r.summary for r in log.of_role("stop")]
    return (f"{op}: rounds planned {len(plans)} (last {plans[-1] if plans else '-'}); candidates {dict(cands)}; "
            f"LLM calls {len(costs)} ({sum(' completions' in c for c in costs)} on /v1/completions, {priced} with a "
            f"cost); rounds {per}: {total / 60:.1f} minutes; stops: {stops or 'none'}", total)


def main(argv: list[str]) -> int:
    job, ops = Path(argv[0]), argv[1:] or list(OPS)
    calls = parts(job)
    print("calls: " + "; ".join(f"part {p.part} {p.ended - p.began:.0f} s, exit code {p.rc}" for p in calls))
    totals = []
    for op in ops:
        line, total = op_line(job, op, calls)
        print(line)
        totals.append(total)
    logs = "".join(p.read_text(errors="replace") for p in sorted(job.glob("optimize-*.log")))
    tracebacks = logs.count("Traceback")
    print(f"tracebacks in optimize's output: {tracebacks}")
    done = all(t >= MINUTES * 60 for t in totals) and all(p.rc == 0 for p in calls) and not tracebacks
    print(f"verdict: {'PASS' if done else 'NOT YET'} ({MINUTES:g}+ minutes of rounds on every op, every call exit 0, "
          "no traceback)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
