"""ncu's `--csv --page details` output -> numeric facts, per profiled launch and per shape.

The naming contract with the driver (harness/ncu.py) lives here: each shape's launch sits in an inner
NVTX range `astra_shape_<i>` inside the `astra` range ncu filters on. With `--nvtx`, ncu's CSV carries the
push/pop stack open at every launch, so a kernel is attributed to its shape by name, however many kernels
an op launches; without that column only a count that matches exactly is trusted (`attribute`).
"""
from __future__ import annotations

import csv
import io
import re

from pydantic import BaseModel

NVTX_RANGE = "astra"
# The inner range of shape i; a name no ncu field ("none", payload types, domains) can contain by accident.
_SHAPE_RANGE = re.compile(rf"\b{NVTX_RANGE}_shape_(\d+)\b")


def shape_range(index: int) -> str:
    return f"{NVTX_RANGE}_shape_{index}"


class NcuLaunch(BaseModel):
    """One profiled kernel launch (one ncu "ID")."""
    id: int
    kernel_name: str
    shape_index: int | None
    """From the launch's NVTX push/pop stack; None where the CSV carries no (or no single) shape range."""
    facts: dict[str, float]


def _csv_rows(text: str) -> list[dict[str, str]]:
    start = text.find('"ID"')  # ncu's own "==PROF==" lines come first
    return list(csv.DictReader(io.StringIO(text[start:]))) if start >= 0 else []


def _add_fact(facts: dict[str, float], row: dict[str, str]) -> None:
    """One details row into {"Section: Metric (unit)": value}; an existing key wins, text values are
    skipped (e.g. a bottleneck name), ncu's thousands separators are removed."""
    name, value = row.get("Metric Name"), (row.get("Metric Value") or "").replace(",", "")
    if not name:
        return
    unit = row.get("Metric Unit") or ""
    key = f"{row.get('Section Name', '')}: {name}" + (f" ({unit})" if unit else "")
    try:
        facts.setdefault(key, float(value))
    except ValueError:
        pass


def parse_ncu_csv(text: str) -> dict[str, float]:
    """`ncu --csv --page details` rows -> {"Section: Metric (unit)": value}; the first kernel's values
    win, numbers only (ncu prints thousands separators)."""
    facts: dict[str, float] = {}
    for row in _csv_rows(text):
        _add_fact(facts, row)
    return facts


def _shape_index(row: dict[str, str]) -> int | None:
    """The shape range in the row's NVTX stack. With `--nvtx` ncu adds a column named like
    "thread Domain:Push/Pop_Range:PL_Type:..." whose cell lists the open ranges (`TID  "<default
    domain>:astra:none:..."  "<default domain>:astra_shape_3:none:..."`); the exact spelling has moved
    between versions, so any NVTX-ish column is searched for the one distinctive name."""
    stacks = " ".join(value or "" for key, value in row.items()
                      if key and ("push/pop" in key.lower() or "nvtx" in key.lower()))
    found = {int(i) for i in _SHAPE_RANGE.findall(stacks)}
    return found.pop() if len(found) == 1 else None


def parse_ncu_launches(text: str) -> list[NcuLaunch]:
    """`ncu --csv --page details` rows grouped by "ID" (one per profiled launch), in launch order."""
    launches: dict[int, NcuLaunch] = {}
    for row in _csv_rows(text):
        try:
            launch_id = int(row.get("ID") or "")
        except ValueError:
            continue  # not a table row
        if launch_id not in launches:
            launches[launch_id] = NcuLaunch(id=launch_id, kernel_name=row.get("Kernel Name") or "",
                                            shape_index=_shape_index(row), facts={})
        _add_fact(launches[launch_id].facts, row)
    return [launches[i] for i in sorted(launches)]


def _combine(launches: list[NcuLaunch]) -> dict[str, float]:
    """One shape's facts: its kernel's as they are, or for an op of several kernels each kernel's
    under "kernel <j>: " (launch order), so no value of one kernel passes for the op's."""
    if len(launches) == 1:
        return dict(launches[0].facts)
    return {f"kernel {j}: {key}": value for j, launch in enumerate(launches) for key, value in launch.facts.items()}


def attribute(launches: list[NcuLaunch], count: int,
              codes: list[int] | None = None) -> tuple[list[dict[str, float]], str | None]:
    """Profiled launches -> per-shape facts for `count` shapes, and a problem (None when all is well).

    By the NVTX shape range where every launch carries one (exact, any number of kernels per shape).
    Otherwise by order, only where the number of launches equals the number of shapes that launched
    (`codes`, from the driver): one kernel each. Anything else is not guessed: every shape gets {}."""
    empty: list[dict[str, float]] = [{} for _ in range(count)]
    if codes is not None and len(codes) != count:
        codes = None  # a report from a driver that did not finish: it says nothing about the rest
    if launches and all(launch.shape_index is not None for launch in launches):
        if any(launch.shape_index >= count for launch in launches):
            return empty, f"a profiled kernel names a shape range beyond the {count} shapes asked for"
        per_shape: list[list[NcuLaunch]] = [[] for _ in range(count)]
        for launch in launches:
            per_shape[launch.shape_index].append(launch)
        missing = [i for i, group in enumerate(per_shape) if not group]
        return ([_combine(group) if group else {} for group in per_shape],
                f"no profiled kernel for shape(s) {missing}" if missing else None)
    launched = [i for i in range(count) if codes is None or codes[i] == 0]
    if len(launches) != len(launched):
        names = sorted({launch.kernel_name for launch in launches})
        return empty, (f"{len(launches)} profiled kernels ({', '.join(names) or 'none'}) for {len(launched)} "
                       "launched shapes and no NVTX shape range in the CSV: not attributed")
    for i, launch in zip(launched, launches):
        empty[i] = dict(launch.facts)
    return empty, None
