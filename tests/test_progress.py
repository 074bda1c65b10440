"""Progress of long steps: a live line on a terminal, one plain line per step elsewhere, nothing for a step that
took no time; the isolated evaluation's stages reach the live line; the patch kernels and the fast path build
at once, with the step's line at the end."""
from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import time

import pytest

from astra_sglang import progress
from astra_sglang.errors import AstraError
from astra_sglang.harness import isolate
from astra_sglang.harness.records import BuildInfo


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def stderr(monkeypatch):
    def use(stream):
        monkeypatch.setattr(sys, "stderr", stream)
        return stream
    return use


@pytest.mark.parametrize("tty", [False, True])
def test_a_step_ends_in_one_line_on_a_terminal_and_off_it(stderr, monkeypatch, tty):
    out = stderr(Tty() if tty else io.StringIO())
    monkeypatch.setattr(progress, "QUIET_S", 0.0)
    with progress.step("building the C++ fast path") as current:
        current.update("compiling")
    last = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue()).strip().splitlines()[-1]  # the live line's codes
    assert last.startswith("building the C++ fast path: done in ") and last.endswith("s")
    if not tty:
        assert out.getvalue().count("\n") == 1  # no live output in a log: the one line


def test_a_quick_step_a_step_that_says_its_own_result_and_a_failing_step_print_nothing(stderr):
    out = stderr(io.StringIO())
    with progress.step("cached"):
        pass
    with progress.step("bench", say_done=False) as current:
        current.start -= 60  # however long it took
    with pytest.raises(AstraError):
        with progress.step("failing") as current:
            current.start -= 60
            raise AstraError("the error says what happened")
    assert out.getvalue() == ""


def test_a_custom_done_line(stderr, monkeypatch):
    out = stderr(io.StringIO())
    monkeypatch.setattr(progress, "QUIET_S", 0.0)
    with progress.step("the decode load", done="the decode load: recorded in {seconds:.0f}s"):
        pass
    assert out.getvalue() == "the decode load: recorded in 0s\n"


def test_a_watched_evaluation_hands_each_stage_on_while_the_child_runs(tmp_path):
    events = tmp_path / "result.json.progress"
    child = ("import json, sys, time\n"
             "f = open(sys.argv[1], 'a')\n"
             "for e in [{'stage': 'build', 'what': 'candidate'}, {'stage': 'check', 'shape': [16, 4096], "
             "'dtype': 'bfloat16'}, {'stage': 'shape_done', 'row': {'shape': [16, 4096], 'dtype': 'bfloat16'}}]:\n"
             "    f.write(json.dumps(e) + '\\n'); f.flush(); time.sleep(0.3)\n"
             "print('done')\n")
    proc = subprocess.Popen([sys.executable, "-c", child, str(events)], stdout=subprocess.PIPE, text=True)
    seen = []
    with isolate.watching(lambda e: seen.append(isolate.describe_event(e))):
        output = isolate._wait(proc, 60, events)
    assert output.strip() == "done"
    assert seen == ["building the candidate", "check 16x4096 bfloat16", "done 16x4096 bfloat16"]


def test_without_a_watcher_the_wait_is_plain_and_keeps_its_timeout(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], stdout=subprocess.PIPE, text=True)
    start = time.perf_counter()
    with pytest.raises(subprocess.TimeoutExpired):
        isolate._wait(proc, 0.5, tmp_path / "none.progress")
    proc.kill()
    proc.communicate()
    with isolate.watching(lambda e: None):
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], stdout=subprocess.PIPE,
                                text=True)
        with pytest.raises(subprocess.TimeoutExpired):
            isolate._wait(proc, 0.5, tmp_path / "none.progress")
        proc.kill()
        proc.communicate()
    assert time.perf_counter() - start < 10


def test_patch_kernels_and_the_fast_path_build_at_once_with_one_line(stderr, monkeypatch, tmp_path):
    from astra_sglang.patching import server_env
    from astra_sglang.patchset.store import PatchStore

    out = stderr(io.StringIO())
    monkeypatch.setattr(progress, "QUIET_S", 0.0)
    for op in ("silu_and_mul", "rmsnorm"):
        (tmp_path / op).mkdir()
        (tmp_path / op / "kernel.cu").write_text("// never built: the builder is a stand-in\n")
        (tmp_path / op / "manifest.json").write_text(json.dumps(
            {"op": op, "dtypes": ["bfloat16"], "targets": [], "provenance": {"method": "hand"}}))
    started = []

    def builder(path, defines, arch):
        started.append(time.perf_counter())
        time.sleep(0.3)
        return BuildInfo(ok=True, library=str(path))

    monkeypatch.setattr(server_env.fastcall, "load", lambda: time.sleep(0.3))
    monkeypatch.setattr(server_env.os, "cpu_count", lambda: 4)
    store = PatchStore(tmp_path, builder=builder)
    server_env.build_all(store, store.enabled(), fast_path=True)
    assert len(started) == 2 and max(started) - min(started) < 0.25  # side by side, not one after the other
    assert out.getvalue().startswith("building 2 patch kernel(s) and the C++ fast path: done in ")

    def failing(path, defines, arch):
        return BuildInfo(ok=False, log="kernel.cu(3): error: identifier \"x\" is undefined")

    with pytest.raises(AstraError, match='^patch .*: kernel build failed: kernel.cu\\(3\\): error: identifier "x"'):
        server_env.build_all(PatchStore(tmp_path, builder=failing), store.enabled(), fast_path=False)
