"""Map nvcc's errors on an extracted kernel.cu back to the original files, through provenance.json's line map.

The emitter records, for every copied piece, the kernel.cu line it starts at and the file and line it came
from (emit.line_map). kernel.cu itself carries no `#line` directives: candidates are edited and compiled
as kernel.cu, so their errors must keep naming kernel.cu's own lines.
"""
from __future__ import annotations

import bisect
import json
import re
from pathlib import Path

# nvcc's front end: "kernel.cu(27): error: ..."; gcc/clang style: "kernel.cu:27:2: error: ..."
_ERROR = re.compile(r"^(?P<file>[^\s:()]*kernel\.cu)(?:\((?P<l1>\d+)\)|:(?P<l2>\d+)(?::\d+)?):\s*(?:catastrophic )?"
                    r"(?:fatal )?error\b[^:]*:?\s*(?P<msg>.*)$", re.M)


def load(source: Path) -> list[list]:
    """The line map of an extracted kernel.cu (provenance.json beside it), or [] if it has none."""
    prov = Path(source).parent / "provenance.json"
    try:
        data = json.loads(prov.read_text())
    except (OSError, ValueError):
        return []
    return data.get("line_map", []) if isinstance(data, dict) else []


def origin(line: int, mapping: list[list]) -> tuple[str, int] | None:
    """(original file, line) of kernel.cu's `line`, or None for generated lines (headers, launcher)."""
    starts = [m[0] for m in mapping]
    i = bisect.bisect_right(starts, line) - 1
    if i < 0:
        return None
    start, count, path, orig = mapping[i]
    return (path, orig + line - start) if line < start + count else None


def explain(log: str, mapping: list[list], limit: int = 5) -> list[str]:
    """'ORIGINAL:LINE (kernel.cu:N): message' for the first errors of an nvcc log that fall in copied code."""
    out: list[str] = []
    for m in _ERROR.finditer(log):
        line = int(m.group("l1") or m.group("l2"))
        where = origin(line, mapping)
        if where is None:
            continue
        text = f"{where[0]}:{where[1]} (kernel.cu:{line}): {m.group('msg').strip()}"
        if text not in out:
            out.append(text)
        if len(out) >= limit:
            break
    return out


def header(log: str, source: Path) -> str:
    """A few lines naming the original files behind the log's errors ("" if kernel.cu has no map)."""
    lines = explain(log, load(source))
    return "errors in extracted code, by original file:\n  " + "\n  ".join(lines) + "\n" if lines else ""
