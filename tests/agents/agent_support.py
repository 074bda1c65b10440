"""Shared pieces of the agent tests: a deterministic stand-in evaluator, scripted answers, the fake server."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI, RoleScript

from astra_sglang.harness.records import BuildInfo, EvalRequest, EvalResult, ShapeResult, Timing
from astra_sglang.optimize.records import LLMConfig, RunConfig
from astra_sglang.paths import kernels_dir
from astra_sglang.specs.registry import get_spec, resolve_shapes

BASE = (kernels_dir() / "silu_and_mul.cu").read_text()


class Killed(Exception):
    """Simulates the process being killed in the middle of a run."""


def marks_of(text: str) -> set[str]:
    return set(re.findall(r"// MARK (\S+)", text))


def speedup_at(marks: set[str], shape) -> float:
    """speedup=X everywhere; small=X / large=X below / from 64 rows (they win over speedup=)."""
    found = dict(m.split("=", 1) for m in marks if "=" in m)
    size = "small" if shape[0] < 64 else "large"
    return float(found.get(size, found.get("speedup", 1.0)))


def knob_factor(src: str, marks: set[str], shape) -> float:
    """A tuner dispatch (`// 16x4096 -> 64, 1` rows): 1.2x where the nearest row's first knob is the
    candidate's `knob_fast=V` mark, else 1.0."""
    import math

    fast = next((m.split("=", 1)[1] for m in marks if m.startswith("knob_fast=")), None)
    rows = re.findall(r"\{ ([-\d., ]+) \},  // \d+(?:x\d+)+ -> ([\d, ]+)$", src, re.M)
    if fast is None or not rows:
        return 1.0
    dims, config = min(rows, key=lambda r: sum((math.log2(max(n, 1)) - float(x)) ** 2
                                               for n, x in zip(shape, r[0].split(","))))
    return 1.2 if config.split(",")[0].strip() == fast else 1.0


def ensemble_marks(src: str):
    """A generated per-shape dispatch: (marks of each member by label, rows (log2 dims, dtype, label))."""
    if "per-shape dispatch among" not in src:
        return None
    parts = re.split(r"^// ---- member \d+: (\S+)$", src.split("// ---- dispatch")[0], flags=re.M)
    members = {parts[i]: marks_of(parts[i + 1]) for i in range(1, len(parts), 2)}
    rows = [([float(x) for x in dims.split(",")], dtype, label) for dims, dtype, label in
            re.findall(r"\{ ([-\d., ]+) \},  // \S+ (\w+) -> (.+)$", src, re.M)]
    return members, rows


def chosen(rows, shape, dtype) -> str:
    import math

    mine = [r for r in rows if r[1] == dtype]
    return min(mine, key=lambda r: sum((math.log2(max(n, 1)) - x) ** 2 for n, x in zip(shape, r[0])))[2]


class StandIn:
    """Evaluator keyed on `// MARK ...` lines in the candidate: build_fail, crash, wrong, heldout_wrong,
    speedup=X (small=X / large=X per shape size), kill. No marker = the baseline (1.0x). A generated
    per-shape dispatch is timed shape by shape as the member it picks there (or declined: the original)."""

    def __init__(self, kill_on: str | None = None):
        self.calls: list[EvalRequest] = []
        self.kill_on = kill_on

    def __call__(self, req: EvalRequest) -> EvalResult:
        self.calls.append(req)
        src = Path(req.candidate.path).read_text()
        marks = set(re.findall(r"// MARK (\S+)", src))
        if self.kill_on and self.kill_on in marks:
            raise Killed(req.candidate.path)
        base = dict(kernel=req.kernel, candidate=req.candidate.name(), baseline="baseline", gpu="FakeGPU")
        if "build_fail" in marks:
            return EvalResult(**base, stage="build", reason="nvcc failed",
                              build=BuildInfo(ok=False, log="kernel.cu(12): error: identifier \"half3\" is undefined"))
        build = BuildInfo(ok=True, registers=40, spill_bytes=0)
        if req.compile_only:
            return EvalResult(**base, ok=True, stage="done", build=build,
                              shapes=[ShapeResult(shape=s, dtype=d) for s in req.shapes for d in req.dtypes])
        if "crash" in marks:
            return EvalResult(**base, stage="crash", reason="illegal memory access (exit -11)", build=build)
        held_out = set(resolve_shapes(get_spec(req.kernel), "held_out"))
        ensemble = ensemble_marks(src)
        shapes = []
        for s in req.shapes:
            for d in req.dtypes:
                here = marks
                if ensemble is not None:
                    label = chosen(ensemble[1], s, d)
                    if label == "the original":
                        shapes.append(ShapeResult(shape=s, dtype=d, covered=False))
                        continue
                    here = ensemble[0][label]
                speedup = speedup_at(here, s) * knob_factor(src, here, s)
                correct = not ("wrong" in here or ("heldout_wrong" in here and tuple(s) in held_out))
                us = 10.0 / speedup
                shapes.append(ShapeResult(shape=s, dtype=d, correct=correct, reason="" if correct else "mismatch",
                                          max_err_ratio=None if correct else 40.0,
                                          candidate=Timing(median_us=us, p10_us=us * 0.95, p90_us=us * 1.05),
                                          baseline=Timing(median_us=10.0, p10_us=9.5, p90_us=10.5),
                                          speedup=speedup, pct_roofline=min(99.0, 40.0 * speedup)))
        ok = all(x.correct is not False for x in shapes)
        return EvalResult(**base, ok=ok, stage="done" if ok else "check", reason="" if ok else "incorrect",
                          build=build, shapes=shapes, roofline_gbps=4000.0, empty_kernel_us=0.9)


def kernel(mark: str = "", extra: str = "") -> str:
    """An answer carrying a complete (safe) kernel file with a marker line."""
    src = BASE.replace('#include "astra_abi.h"\n', f'#include "astra_abi.h"\n// MARK {mark}\n{extra}') if mark else BASE
    return f"Here is the new kernel.\n\n```cuda\n{src}```\n"


PLAN = "1. Vectorize loads with 16-byte accesses.\n2. Use __expf in place of expf."
TESTS = '```json\n{"shapes": [[7, 4100], [1, 128], [3, 5, 7], [0, 4]], "trials": 4, "rationale": "tails"}\n```'
SUMMARY = "- memory bound at large shapes\n- latency bound at 1 token"


@pytest.fixture
def fake():
    servers = []

    def start(scripts, defaults=None):
        server = FakeOpenAI(RoleScript(scripts, defaults)).__enter__()
        servers.append(server)
        return server

    yield start
    for s in servers:
        s.__exit__(None, None, None)


def llm_config(server, **kw) -> LLMConfig:
    kw.setdefault("backoff_s", 0.01)
    kw.setdefault("timeout_s", 5.0)
    return LLMConfig(model="o4-mini", base_url=server.base_url, api_key="test-key", **kw)


def run_config(**kw) -> RunConfig:
    """The paper's loop (one candidate a round, no repairs) unless the test asks for a population."""
    kw.setdefault("population", 1)
    kw.setdefault("plans", 1)
    kw.setdefault("repairs", 0)
    kw.setdefault("kernel", "silu_and_mul")
    kw.setdefault("start_source", str(kernels_dir() / "silu_and_mul.cu"))
    kw.setdefault("shapes", "quick")
    kw.setdefault("dtypes", ["bfloat16"])
    kw.setdefault("rounds", 2)
    return RunConfig(**kw)
