"""Read the chrome traces SGLang's /start_profile writes (torch profiler, `*.trace.json.gz`).

What is used: GPU kernels (`cat == "kernel"`: name, start, duration, and the correlation id of the host call
that launched them, a cudaGraphLaunch for kernels replayed from a CUDA graph); host launch calls
(`cuda_runtime`, `cuda_driver`: their time); SGLang's scheduler-step spans (`step[EXTEND bs=4 toks=2048]`,
`step[DECODE bs=64]`, user annotations on the host) that say which step, phase and token count a launch
belongs to; and CPU ops with their input shapes (`record_shapes`), joined to kernels by "External id".
`trim` keeps only that, for small test fixtures written from real runs.
"""
from __future__ import annotations

import bisect
import gzip
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from astra_sglang.errors import AstraError

STEP = re.compile(r"^step\[(?P<mode>[A-Z_]+) bs=(?P<bs>\d+)(?: toks=(?P<toks>\d+))?\]$")
PHASES = {"EXTEND": "prefill", "DECODE": "decode", "MIXED": "prefill"}
LAUNCH_CATS = ("cuda_runtime", "cuda_driver")


@dataclass(frozen=True)
class Step:
    phase: str
    """prefill, decode, or the mode's own name in lower case (e.g. target_verify)."""
    batch: int
    tokens: int
    """Tokens the step's forward ran: toks of an EXTEND step, the batch of a DECODE step."""
    ts: float
    dur: float


@dataclass(frozen=True)
class Kernel:
    name: str
    ts: float
    dur: float
    correlation: int | None
    external: int | None


@dataclass(frozen=True)
class CpuOp:
    name: str
    dims: list
    types: list


@dataclass
class Trace:
    path: str
    kernels: list[Kernel]
    steps: list[Step]
    launches: dict[int, float] = field(default_factory=dict)
    """correlation id -> host time of the launch call."""
    ops: dict[int, CpuOp] = field(default_factory=dict)
    """External id -> the CPU op that launched the kernel (where shapes were recorded)."""

    def __post_init__(self):
        self.steps.sort(key=lambda s: s.ts)
        self._starts = [s.ts for s in self.steps]

    def phase_of(self, kernel: Kernel) -> str:
        """The phase of the last step begun before `kernel`'s launch: the work between two forwards (sampling,
        the scheduler's own kernels) counts toward the step it follows. '' before the first step."""
        at = self.launches.get(kernel.correlation) if kernel.correlation is not None else None
        i = bisect.bisect_right(self._starts, at if at is not None else kernel.ts) - 1
        return self.steps[i].phase if i >= 0 else ""

    def step_of(self, kernel: Kernel) -> Step | None:
        """The scheduler step whose span holds the host call that launched `kernel`."""
        at = self.launches.get(kernel.correlation) if kernel.correlation is not None else None
        if at is None or not self.steps:
            return None
        i = bisect.bisect_right(self._starts, at) - 1
        if i >= 0 and at <= self.steps[i].ts + self.steps[i].dur:
            return self.steps[i]
        return None


def _events(path: Path) -> list[dict]:
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt") as fh:
            data = json.load(fh)
    except (OSError, EOFError, json.JSONDecodeError) as exc:
        raise AstraError(f"cannot read trace {path}: {exc}") from None
    events = data.get("traceEvents", data) if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise AstraError(f"{path} is not a chrome trace (no traceEvents list)")
    return events


def _int(value) -> int | None:
    return int(value) if isinstance(value, (int, float)) else None


def load(path: str | Path) -> Trace:
    path = Path(path)
    kernels, steps, launches, ops = [], [], {}, {}
    for ev in _events(path):
        if ev.get("ph") != "X":
            continue
        cat, args = ev.get("cat", ""), ev.get("args") or {}
        if cat == "kernel":
            kernels.append(Kernel(ev.get("name", "?"), float(ev["ts"]), float(ev.get("dur", 0.0)),
                                  _int(args.get("correlation")), _int(args.get("External id"))))
        elif cat in LAUNCH_CATS and _int(args.get("correlation")) is not None:
            launches[_int(args["correlation"])] = float(ev["ts"])
        elif cat == "user_annotation" and (m := STEP.match(ev.get("name", ""))):
            mode, bs = m["mode"], int(m["bs"])
            steps.append(Step(PHASES.get(mode, mode.lower()), bs, int(m["toks"]) if m["toks"] else bs,
                              float(ev["ts"]), float(ev.get("dur", 0.0))))
        elif cat == "cpu_op" and "Input Dims" in args and _int(args.get("External id")) is not None:
            ops[_int(args["External id"])] = CpuOp(ev.get("name", "?"), args["Input Dims"], args.get("Input type", []))
    if not kernels:
        raise AstraError(f"{path} holds no GPU kernels (was the profile taken with activities GPU?)")
    return Trace(str(path), kernels, steps, launches, ops)


def trim(path: str | Path, out: str | Path, max_steps: int = 6) -> Path:
    """A copy of a trace with only what `load` reads, from the first `max_steps` steps of each phase (all of
    it where there are no step spans): small enough to commit as a test fixture, parsed the same way."""
    events = [e for e in _events(Path(path)) if e.get("ph") == "X"]
    steps = sorted((e for e in events if e.get("cat") == "user_annotation" and STEP.match(e.get("name", ""))),
                   key=lambda e: e["ts"])
    kept_steps, per_phase = [], {}
    for e in steps:
        phase = PHASES.get(STEP.match(e["name"])["mode"], "other")
        if per_phase.get(phase, 0) < max_steps:
            per_phase[phase] = per_phase.get(phase, 0) + 1
            kept_steps.append(e)
    spans = [(e["ts"], e["ts"] + e.get("dur", 0.0)) for e in kept_steps]

    def in_steps(ts: float) -> bool:
        return not spans or any(a <= ts <= b for a, b in spans)

    launch = {e["args"]["correlation"]: e for e in events
              if e.get("cat") in LAUNCH_CATS and "correlation" in (e.get("args") or {}) and in_steps(e["ts"])}
    kernels = [e for e in events if e.get("cat") == "kernel" and (e.get("args") or {}).get("correlation") in launch]
    externals = {(e.get("args") or {}).get("External id") for e in kernels}
    cpu = [{**e, "args": {k: v for k, v in e["args"].items() if k in ("External id", "Input Dims", "Input type")}}
           for e in events if e.get("cat") == "cpu_op" and (e.get("args") or {}).get("External id") in externals
           and "Input Dims" in e["args"]]
    slim = lambda e, keys: {**{k: e[k] for k in ("ph", "cat", "name", "ts", "dur") if k in e},  # noqa: E731
                            "args": {k: v for k, v in (e.get("args") or {}).items() if k in keys}}
    out_events = ([slim(e, ()) for e in kept_steps] + [slim(e, ("correlation",)) for e in launch.values()]
                  + [slim(e, ("correlation", "External id")) for e in kernels] + cpu)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(out, "wt") as fh:
        json.dump({"traceEvents": out_events}, fh)
    return out
