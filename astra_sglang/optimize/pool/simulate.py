"""Simulated builds and evaluations, for the search machinery on machines without a GPU (CI, the
benchmark's --simulate mode): the pool, the Ray backend and the population loop run unchanged, only the
nvcc and GPU time are sleeps of a stated length.

Results are deterministic functions of the candidate's text: `// MARK build_fail | crash | wrong |
speedup=X` lines decide (as in the agent tests), and so do the replay model's deliberate mutations
(optimize/agents/replay.py: a "deliberately broken" line does not build, a "deliberately wrong" one is incorrect,
as the harness finds them on a GPU); any other kernel gets a speedup from a hash of its text,
per shape, so a population has real differences to select on. Each simulated shape has a floor (no kernel
is more than 1.5x faster than the baseline there), reported as the roofline. Both are picklable
dataclasses: they run in GPU worker processes and as Ray tasks.
"""
from __future__ import annotations

import json
import math
import os
import re
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

from astra_sglang.harness.records import BuildInfo, EvalRequest, EvalResult, ShapeResult, Timing

FLOOR = 1.5
"""The simulated roofline: the best any kernel can be at a shape, as a speedup over the baseline."""


def marks(text: str) -> set[str]:
    found = set(re.findall(r"// MARK (\S+)", text))
    if "// deliberately broken" in text:
        found.add("build_fail")
    if "// deliberately wrong" in text:
        found.add("wrong")
    return found


def _unit(text: str) -> float:
    """A deterministic number in [0, 1) from a text."""
    return (zlib.crc32(text.encode()) % 10007) / 10007


def simulated_speedup(text: str, shape: tuple[int, ...], dtype: str) -> float:
    found = next((float(m.split("=", 1)[1]) for m in marks(text) if m.startswith("speedup=")), None)
    base = found if found is not None else 0.8 + 0.6 * _unit(text)
    spread = 1.0 if found is not None else 1.0 + 0.3 * (_unit(f"{text}|{shape}|{dtype}") - 0.5)
    return min(base * spread, FLOOR)


def _builds(text: str) -> bool:
    return "build_fail" not in marks(text) and ("ASTRA_ENTRY" in text or "astra_launch" in text)


@dataclass(frozen=True)
class SimulatedBuilder:
    """build_library's stand-in: `seconds` of CPU time per build; a file without the entry does not build."""

    seconds: float = 2.0

    def __call__(self, path: str, defines: dict, arch: str | None) -> BuildInfo:
        text = Path(path).read_text()
        time.sleep(self.seconds)
        if not _builds(text):
            return BuildInfo(ok=False, seconds=self.seconds, log="kernel.cu(1): error: simulated build failure")
        return BuildInfo(ok=True, seconds=self.seconds, registers=32, spill_bytes=0)


@dataclass(frozen=True)
class SimulatedEvaluator:
    """harness.isolate.evaluate's stand-in: `seconds` of GPU time per evaluation; appends (GPU, start, end)
    to `trace` (JSONL) when set, so a test can check that no two evaluations shared a GPU."""

    seconds: float = 5.0
    build_seconds: float = 0.0
    """Time the evaluation spends building when the pool did not build first (the sequential loop)."""
    trace: str | None = None

    def __call__(self, req: EvalRequest) -> EvalResult:
        text = Path(req.candidate.path).read_text()
        gpu = os.environ.get("CUDA_VISIBLE_DEVICES", "-")
        base = dict(kernel=req.kernel, candidate=req.candidate.name(), baseline=req.baseline.name() if req.baseline
                    else f"ours:{req.kernel}", gpu=f"simulated GPU {gpu}")
        time.sleep(self.build_seconds)
        build = BuildInfo(ok=_builds(text), seconds=self.build_seconds, registers=32, spill_bytes=0)
        if not build.ok:
            return EvalResult(**base, stage="build", reason="build failed: simulated", build=build)
        if req.compile_only:
            return EvalResult(**base, ok=True, stage="done", build=build,
                              shapes=[ShapeResult(shape=s, dtype=d) for d in req.dtypes for s in req.shapes])
        start = time.time()
        time.sleep(self.seconds)
        if self.trace:
            with open(self.trace, "a") as f:
                f.write(json.dumps({"gpu": gpu, "pid": os.getpid(), "start": start, "end": time.time()}) + "\n")
        if "crash" in marks(text):
            return EvalResult(**base, stage="crash", reason="illegal memory access (simulated)", build=build)
        rows = [self._row(text, tuple(s), d) for d in req.dtypes for s in req.shapes]
        ok = all(r.correct for r in rows)
        return EvalResult(**base, ok=ok, stage="done" if ok else "check", build=build, shapes=rows,
                          reason="" if ok else "incorrect (simulated)", roofline_gbps=4000.0, empty_kernel_us=1.0)

    def _row(self, text: str, shape: tuple[int, ...], dtype: str) -> ShapeResult:
        if "wrong" in marks(text):
            return ShapeResult(shape=shape, dtype=dtype, correct=False, reason="mismatch (simulated)",
                               max_err_ratio=40.0)
        speedup = simulated_speedup(text, shape, dtype)
        base_us = 2.0 + 1e-6 * math.prod(shape)
        us = base_us / speedup
        return ShapeResult(shape=shape, dtype=dtype, correct=True, speedup=speedup,
                           candidate=Timing(median_us=us, p10_us=us * 0.98, p90_us=us * 1.02),
                           baseline=Timing(median_us=base_us, p10_us=base_us * 0.98, p90_us=base_us * 1.02),
                           floor_us=base_us / FLOOR, pct_roofline=100.0 * speedup / FLOOR)
