"""What two servers of a paired A/B resolved differently: their /server_info replies, flattened and compared.

Why: two identical unpatched servers on one H100 (2026-11-25, `benchmarks/results/2026-11-25-h100/dense-aa/`)
differed by 13-16% in throughput and 30% in ITL, B worse in both round orders, with equal KV pools and steady
clocks. SGLang sizes more than its KV pool at start (CUDA-graph batch sizes, chunked prefill, running-request
cap, graph memory) from the GPU it finds, and the second server finds the first one on it. Every setting that
differs is listed, so a paired run names such a cause instead of leaving it to the reader.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

DIFF_FILE = "settings-diff.json"
IGNORED = ("port", "host", "pid", "url", "throughput", "timestamp", "#queue-req", "#running-req", "last_")
"""Keys that differ by construction (each server's own port) or move with load, not with how it was set up."""
FLOAT_RTOL = 0.01
"""Floats (memory sizes in GB) within 1% are the same: allocations round differently between starts."""


@dataclass(frozen=True)
class SettingDiff:
    key: str
    """Dotted path in /server_info (internal_states.0.memory_usage.graph)."""
    a: object
    b: object


def flatten(value, prefix: str = "") -> dict[str, object]:
    """Nested dicts and lists as {dotted path: leaf value}."""
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        items = ((str(i), v) for i, v in enumerate(value))
    else:
        return {prefix: value} if prefix else {}
    out: dict[str, object] = {}
    for key, inner in items:
        out.update(flatten(inner, f"{prefix}.{key}" if prefix else str(key)))
    return out


def _same(a, b) -> bool:
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (a, b))
    if numbers and (isinstance(a, float) or isinstance(b, float)):
        return math.isclose(a, b, rel_tol=FLOAT_RTOL)
    return a == b


def differences(info_a: dict, info_b: dict) -> list[SettingDiff]:
    """Every setting the two replies hold differently (or only one holds), ports and load counters aside."""
    a, b = flatten(info_a), flatten(info_b)
    keys = sorted(k for k in set(a) | set(b) if not any(word in k.rsplit(".", 1)[-1] for word in IGNORED))
    missing = object()
    out = []
    for key in keys:
        va, vb = a.get(key, missing), b.get(key, missing)
        if va is missing or vb is missing or not _same(va, vb):
            out.append(SettingDiff(key, None if va is missing else va, None if vb is missing else vb))
    return out


def summary(diffs: list[SettingDiff], have_both: bool) -> str:
    """One line for the console."""
    if not have_both:
        return "settings: a server's /server_info was unavailable, so the two were not compared"
    if not diffs:
        return "settings: A and B resolved the same settings (ports aside)"
    shown = "; ".join(f"{d.key}: {d.a} vs {d.b}" for d in diffs[:8])
    return f"settings: A and B resolved {len(diffs)} differently: {shown}" + ("; ..." if len(diffs) > 8 else "")


def write(out: Path, diffs: list[SettingDiff], have_both: bool, name: str = DIFF_FILE) -> None:
    (Path(out) / name).write_text(json.dumps({"compared": have_both, "differences": [asdict(d) for d in diffs]},
                                                  indent=1, default=str))


def read(out: Path) -> dict | None:
    """The paired run's comparison ({"compared", "differences"}), or None where none was written."""
    path = Path(out) / DIFF_FILE
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
