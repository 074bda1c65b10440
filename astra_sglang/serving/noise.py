"""Controls for the noise of a serving A/B, where the spread between identical servers (15-30% in output
throughput on one H100, one start after another) hides kernel-level effects of a few %:

- the GPU's state before and after every benchmark (nvidia-smi: SM / memory clock, temperature, power, and the
  active clock-event reasons, i.e. throttling), so a round measured at lower clocks can be seen;
- an A/A control (`ab --paired --control`): B is a second unpatched server started the same way, so the
  interval the paired rounds reach is the noise floor the real A/B must get under;
- a stop rule (`--target-width`): paired rounds go on until the interval of the median throughput change is
  that narrow (after MIN_ROUNDS_TO_STOP rounds), or the rounds run out.
The other controls live with the command: a fixed prompt seed, warm-up rounds, equal memory settings.
"""
from __future__ import annotations

import os
import shutil
import subprocess

from astra_sglang.serving import design_stats

FIELDS = ("sm_mhz", "mem_mhz", "temp_c", "power_w", "reasons")
# `clocks_event_reasons` is the newer drivers' name of `clocks_throttle_reasons`; one of the two answers.
QUERIES = ("clocks.sm,clocks.mem,temperature.gpu,power.draw,clocks_event_reasons.active",
           "clocks.sm,clocks.mem,temperature.gpu,power.draw,clocks_throttle_reasons.active")
IDLE = 0x1  # "GPU idle": the clocks are low because nothing runs, not a limit


def _gpu_index() -> str:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return visible if visible.isdigit() else "0"


def parse_state(line: str) -> dict | None:
    """One nvidia-smi CSV line (no header, no units) as numbers; None where it does not parse."""
    parts = [p.strip() for p in line.split(",")]
    if len(parts) != len(FIELDS):
        return None
    try:
        values = [float(p) for p in parts[:4]] + [int(parts[4], 16)]
    except ValueError:
        return None
    return dict(zip(FIELDS, values))


def gpu_state(run=subprocess.run, index: str | None = None) -> dict | None:
    """The GPU's clocks, temperature, power and clock-event reasons now (GPU `index`, default the first visible
    one), or None without nvidia-smi."""
    if shutil.which("nvidia-smi") is None:
        return None
    for query in QUERIES:
        try:
            done = run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits", "-i",
                        index or _gpu_index()],
                       capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        state = parse_state(done.stdout.strip().splitlines()[0]) if done.returncode == 0 and done.stdout else None
        if state is not None:
            return state
    return None


def throttled(state: dict | None) -> bool:
    return bool(state and state["reasons"] & ~IDLE)


def clock_summary(rows: list[dict]) -> list[dict]:
    """Per arm over its benchmarks: SM clock range, hottest temperature, benchmarks with a clock-event reason
    (other than idle) before or after."""
    out = []
    for arm in sorted({r["arm"] for r in rows}):
        states = [s for r in rows if r["arm"] == arm for s in (r.get("gpu") or {}).values() if s]
        if not states:
            continue
        flagged = sum(1 for r in rows if r["arm"] == arm and any(throttled(s) for s in (r.get("gpu") or {}).values()))
        out.append(dict(arm=arm, samples=len(states), sm_min=min(s["sm_mhz"] for s in states),
                        sm_max=max(s["sm_mhz"] for s in states), temp_max=max(s["temp_c"] for s in states),
                        throttled=flagged, benchmarks=sum(1 for r in rows if r["arm"] == arm)))
    return out


MIN_ROUNDS_TO_STOP = 5


def width_reached(rows: list[dict], target_pct: float, key: str = "output_throughput") -> bool:
    """True once the paired rounds' interval of the change in `key` is at most target_pct wide (after
    MIN_ROUNDS_TO_STOP rounds)."""
    change = design_stats.change(rows, key, key, "", True)
    return bool(change and change.interval and change.units >= MIN_ROUNDS_TO_STOP
                and change.interval.hi - change.interval.lo <= target_pct)
