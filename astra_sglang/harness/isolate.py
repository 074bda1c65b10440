"""Run an evaluation in a child process with a hard timeout: a segfault, hang or CUDA fault fails that
candidate only, with a reason saying where it happened; the caller goes on."""
from __future__ import annotations

import contextlib
import contextvars
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator

from astra_sglang.harness.records import EvalRequest, EvalResult, ShapeResult


SESSION_FACTS = ("gpu", "roofline_gbps", "empty_kernel_us", "matmul_tflops")
"""What the child's "loaded" event says about the GPU session (worker.evaluate_here), kept in a rebuilt result."""


def _progress(path: Path) -> tuple[list[ShapeResult], dict, dict]:
    """The rows the child finished, its last event, and the session facts it reported."""
    rows, last, facts = [], {}, {}
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue  # the child died mid-write
            if event.get("stage") == "shape_done":
                rows.append(ShapeResult.model_validate(event["row"]))
            if event.get("stage") == "loaded":
                facts = {k: event[k] for k in SESSION_FACTS if event.get(k) is not None}
            last = event
    return rows, last, facts


def _where(last: dict, total: int) -> str:
    """Where the child was: "during time of shape (64, 4096) bfloat16", "after shape (...) bfloat16, 7 of 7 done"."""
    if not last:
        return "before the first step"
    if last.get("stage") == "shape_done":
        row = last.get("row") or {}
        return f"after shape {tuple(row.get('shape', ()))} {row.get('dtype', '')}, {last.get('done', '?')} of {total} done"
    if "shape" in last:
        return f"during {last['stage']} of shape {tuple(last['shape'])} {last.get('dtype', '')}".rstrip()
    return f"during {last['stage']} ({last.get('what', '')})"


def prebuild(sources: list[tuple[str, dict[str, str], str | None]]) -> None:
    """(path, defines, arch) builds in parallel on the CPU cores, into the shared build cache; a failing
    build is left for the evaluation to report."""
    from concurrent.futures import ThreadPoolExecutor

    from astra_sglang.harness.build import build_library

    unique = {(path, tuple(sorted(defines.items())), arch) for path, defines, arch in sources}
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        list(pool.map(lambda s: build_library(s[0], dict(s[1]), s[2]), unique))


def evaluate_many(reqs: list[EvalRequest], evaluator=None, on_result=None) -> list[EvalResult]:
    """Several candidates: every build in parallel first, then the GPU evaluations one at a time (timing
    is serialized per device), each in its own isolated, time-limited process."""
    prebuild([(r.candidate.path, r.candidate.defines, r.arch) for r in reqs if not r.candidate.is_python])
    results = []
    for req in reqs:
        results.append((evaluator or evaluate)(req))
        if on_result:
            on_result(req, results[-1])
    return results


MAX_BASELINE_FAULTS = 8
"""Re-runs after the baseline crashed a child (each costs a process start and the roofline probe)."""


def evaluate(req: EvalRequest, workdir: str | Path | None = None) -> EvalResult:
    """Build, check and time `req` in a fresh Python process; never raises for a bad candidate.

    A fault in the *baseline* (the original op crashing at a shape it was never meant for) is not the
    candidate's: the evaluation goes on in a new child, which keeps the rows already done and checks that
    shape against the reference alone.
    """
    start = time.perf_counter()
    req = _absolute(req)  # the child runs in a scratch directory
    for _ in range(MAX_BASELINE_FAULTS + 1):
        result = _evaluate_once(req, workdir)
        if result.stage != "baseline_crash" or result.baseline_fault is None:
            break
        req = req.model_copy(update={"baseline_faults": [*req.baseline_faults, result.baseline_fault],
                                     "done": result.shapes})
    else:
        result.stage, result.ok = "crash", False
        result.reason = f"the baseline crashed more than {MAX_BASELINE_FAULTS} times: {result.reason}"
    result.wall_s = time.perf_counter() - start
    return result


def _evaluate_once(req: EvalRequest, workdir: str | Path | None) -> EvalResult:
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="astra-eval-", dir=workdir) as tmp:
        request, result = Path(tmp) / "request.json", Path(tmp) / "result.json"
        request.write_text(req.model_dump_json())
        # A new session: a timeout kills the whole group (nvcc, ptxas) and the candidate cannot signal us.
        proc = subprocess.Popen([sys.executable, "-m", "astra_sglang.harness.worker", str(request), str(result)],
                                cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True, env={**os.environ, **CHILD_ENV})
        try:
            output = _wait(proc, req.timeout_s, result.with_name(result.name + ".progress"))
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            output, _ = proc.communicate()
            timed_out = True
        if result.is_file() and not timed_out:
            done = EvalResult.model_validate_json(result.read_text())
            # the child's own wall (wall_s, from its evaluate_here) leaves out its start and imports
            done.phases = {"process": round(time.perf_counter() - start - done.wall_s, 3), **done.phases}
            return done
        rows, last, facts = _progress(result.with_name(result.name + ".progress"))
        failed = EvalResult(kernel=req.kernel, candidate=req.candidate.name(), baseline=req.baseline_name(),
                            shapes=[*req.done, *rows], l2=req.l2, wall_s=time.perf_counter() - start, **facts)
        where = _where(last, len(req.shapes) * len(req.dtypes))
        if timed_out:
            failed.stage, failed.reason = "timeout", f"timed out after {req.timeout_s:.0f}s {where}"
        else:
            failed.stage = "crash"
            failed.reason = f"{_exit_text(proc.returncode)} {where}: {_tail(output)}"
        return failed


_WATCHER: contextvars.ContextVar[Callable[[dict], None] | None] = contextvars.ContextVar("astra_watcher", default=None)
POLL_S = 0.5


@contextlib.contextmanager
def watching(on_event: Callable[[dict], None]) -> Iterator[None]:
    """Evaluations run inside the block (in this thread) hand each progress event of their child (build, check
    of a shape, a shape done) to `on_event` while it runs: a command's live progress line."""
    token = _WATCHER.set(on_event)
    try:
        yield
    finally:
        _WATCHER.reset(token)


def describe_event(event: dict) -> str:
    """A child's progress event as a few words: "building the candidate", "check 16x4096 bfloat16"."""
    stage, row = event.get("stage", ""), event.get("row") or {}
    shape, dtype = event.get("shape") or row.get("shape"), event.get("dtype") or row.get("dtype", "")
    if stage == "build":
        return f"building the {event.get('what', 'kernel')}"
    where = f" {'x'.join(map(str, shape))} {dtype}".rstrip() if shape else ""
    return ("done" if stage == "shape_done" else stage) + where


def _wait(proc: subprocess.Popen, timeout_s: float, progress: Path) -> str:
    """The child's output once it exits (TimeoutExpired past `timeout_s`), its progress events handed to the
    watcher, if any, meanwhile."""
    watcher = _WATCHER.get()
    if watcher is None:
        return proc.communicate(timeout=timeout_s)[0]
    deadline, seen = time.perf_counter() + timeout_s, 0

    def hand_on(final: bool) -> int:
        events = progress.read_text().splitlines() if progress.is_file() else []
        done = seen
        for line in events[seen:]:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                if not final:
                    break  # a line still being written: read again on the next poll
                continue
            watcher(event)
            done += 1
        return done

    while True:
        try:
            output = proc.communicate(timeout=max(0.0, min(POLL_S, deadline - time.perf_counter())))[0]
            hand_on(final=True)  # what it wrote since the last poll
            return output
        except subprocess.TimeoutExpired:
            if time.perf_counter() >= deadline:
                raise
        seen = hand_on(final=False)


# Eager module loading: a lazily loaded kernel's first launch can synchronize the device, which would
# hide a candidate that launches on a stream of its own (seen on an H200, 2026-11-21).
CHILD_ENV = {"PYTHONUNBUFFERED": "1", "CUDA_MODULE_LOADING": "EAGER"}


def _absolute(req: EvalRequest) -> EvalRequest:
    def fix(source):
        if source is None or source.is_python:
            return source
        return source.model_copy(update={"path": str(Path(source.path).resolve())})

    return req.model_copy(update={"candidate": fix(req.candidate), "baseline": fix(req.baseline)})


evaluate.prebuild = prebuild  # callers holding only the evaluator (the agent loop) can build ahead


def _exit_text(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


def _tail(output: str) -> str:
    lines = [ln for ln in (output or "").strip().splitlines() if ln.strip()]
    return (lines[-1] if lines else "no output")[:300]
