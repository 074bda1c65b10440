"""Where a scheduler step's host wall time goes, step by step, from SGLang's torch-profiler traces.

Why: with the tuned attention launch configs in place, the prefill step's mean host wall rose from 4.91 to
7.86 ms (H100, 2026-11-25) with its GPU time unchanged, and the profiles kept only the mean. These figures tell
the candidate causes apart:
- one slow step (a Triton JIT compile or a module load) against a cost on every step: the median beside the
  mean, and the longest step;
- module loads inside steps (cuModuleLoad*, cuLibraryLoad*: a kernel compiled or read from Triton's cache at
  first use, e.g. a config the tuned table picks that the server had not run before);
- time in the launch calls themselves (a blocked launch: the GPU's queue full) against the host's Python
  between them (the patch's own code, SGLang's).
Usage: python3 benchmarks/step_walls.py TRACE [TRACE ...]  (a trace file or a folder of them; one label each
as LABEL=PATH). Prints per trace and phase the per-step table's summary and the five longest steps.
"""
from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from astra_sglang.profile.trace import LAUNCH_CATS, PHASES, STEP

MODULE_LOADS = ("cuModuleLoad", "cuLibraryLoad", "cuModuleGetFunction", "cuLibraryGetKernel")


@dataclass(frozen=True)
class StepTime:
    phase: str
    tokens: int
    wall_us: float
    launch_us: float
    """Time inside launch calls (cudaLaunchKernel, cuLaunchKernel, cudaGraphLaunch...) during the step."""
    longest_launch_us: float
    module_loads: int
    launches: int

    @property
    def between_us(self) -> float:
        """The host's own work between launch calls (Python, SGLang, a patch)."""
        return self.wall_us - self.launch_us


def _events(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        data = json.load(fh)
    return data.get("traceEvents", data) if isinstance(data, dict) else data


def step_times(path: Path) -> list[StepTime]:
    events = [e for e in _events(path) if e.get("ph") == "X"]
    steps = sorted((e for e in events if e.get("cat") == "user_annotation" and STEP.match(e.get("name", ""))),
                   key=lambda e: e["ts"])
    calls = sorted((e for e in events if e.get("cat") in LAUNCH_CATS), key=lambda e: e["ts"])
    out, i = [], 0
    for step in steps:
        start, end = step["ts"], step["ts"] + step.get("dur", 0.0)
        while i < len(calls) and calls[i]["ts"] < start:
            i += 1
        inside = []
        j = i
        while j < len(calls) and calls[j]["ts"] <= end:
            inside.append(calls[j])
            j += 1
        match = STEP.match(step["name"])
        launches = [c for c in inside if not c.get("name", "").startswith(MODULE_LOADS)]
        out.append(StepTime(phase=PHASES.get(match["mode"], match["mode"].lower()),
                            tokens=int(match["toks"] or match["bs"]), wall_us=float(step.get("dur", 0.0)),
                            launch_us=sum(float(c.get("dur", 0.0)) for c in launches),
                            longest_launch_us=max((float(c.get("dur", 0.0)) for c in launches), default=0.0),
                            module_loads=sum(1 for c in inside if c.get("name", "").startswith(MODULE_LOADS)),
                            launches=len(launches)))
    return out


def summary(label: str, times: list[StepTime]) -> list[str]:
    lines = []
    for phase in sorted({t.phase for t in times}):
        mine = [t for t in times if t.phase == phase]
        walls = [t.wall_us for t in mine]
        lines.append(f"{label} {phase}: {len(mine)} steps, wall mean {statistics.fmean(walls) / 1e3:.2f} ms, median "
                     f"{statistics.median(walls) / 1e3:.2f} ms, longest {max(walls) / 1e3:.2f} ms; in launch calls "
                     f"median {statistics.median(t.launch_us for t in mine) / 1e3:.2f} ms (longest call "
                     f"{max(t.longest_launch_us for t in mine) / 1e3:.2f} ms); between them median "
                     f"{statistics.median(t.between_us for t in mine) / 1e3:.2f} ms; module loads in steps "
                     f"{sum(t.module_loads for t in mine)}")
        for t in sorted(mine, key=lambda t: -t.wall_us)[:5]:
            lines.append(f"  {t.tokens:6d} tokens  wall {t.wall_us / 1e3:7.2f} ms  launches {t.launches:4d} in "
                         f"{t.launch_us / 1e3:6.2f} ms (longest {t.longest_launch_us / 1e3:6.2f})  between "
                         f"{t.between_us / 1e3:6.2f} ms  module loads {t.module_loads}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="+", help="[LABEL=]PATH: a trace file or a folder of *.trace.json*")
    args = parser.parse_args(argv)
    for item in args.traces:
        label, _, path = item.rpartition("=")
        path = Path(path)
        files = sorted(path.rglob("*.trace.json*")) if path.is_dir() else [path]
        times = [t for f in files for t in step_times(f)]
        if not times:
            print(f"{label or path}: no scheduler steps in {len(files)} trace file(s)")
            continue
        print("\n".join(summary(label or str(path), times)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
