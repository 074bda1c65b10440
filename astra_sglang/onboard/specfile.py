"""Changes to a user spec file in place, line by line: what the CPU check and the first GPU run found (dtypes,
tolerances, the reference, `[onboard]`) written into the file the user may already have edited, keeping every
other line and comment. Each edit is checked by loading the result before it is written."""
from __future__ import annotations

import json
import re
from pathlib import Path

from astra_sglang.errors import AstraError

_TABLE = re.compile(r"^\s*\[\[?([A-Za-z_][\w.]*)\]\]?\s*(#.*)?$")


def toml_value(value) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return json.dumps(value)


def _span(lines: list[str], table: str) -> tuple[int, int]:
    """[start, end) of the lines of `table` ("" = the top level, before the first table); (-1, -1) if absent."""
    start = 0 if not table else -1
    for i, line in enumerate(lines):
        match = _TABLE.match(line)
        if match:
            if start >= 0:
                return start, i
            if match.group(1) == table and not line.lstrip().startswith("[["):
                start = i + 1
    return (start, len(lines)) if start >= 0 else (-1, -1)


def set_key(text: str, table: str, key: str, value) -> str:
    """`key = value` in `table` ("" for top level): the existing line replaced (with its comment, which spoke of
    the old value), else added at the table's end (the table itself added at the file's end where it has none)."""
    lines = text.splitlines()
    start, end = _span(lines, table)
    entry = f"{key} = {toml_value(value)}"
    if start < 0:
        return text.rstrip("\n") + f"\n\n[{table}]\n{entry}\n"
    pattern = re.compile(rf"^\s*{re.escape(key)}\s*=")
    for i in range(start, end):
        if pattern.match(lines[i]):
            lines[i] = entry
            return "\n".join(lines) + "\n"
    while end > start and not lines[end - 1].strip():
        end -= 1
    lines.insert(end, entry)
    return "\n".join(lines) + "\n"


def drop_table(text: str, table: str) -> str:
    """`text` without `[table]` and its lines (up to the next table)."""
    lines = text.splitlines()
    start, end = _span(lines, table)
    if start < 0:
        return text
    return "\n".join(lines[:start - 1] + lines[end:]) + "\n"


def rewrite(path: Path, changes: list[tuple[str, str, object]], drop: tuple[str, ...] = ()) -> str:
    """Apply (table, key, value) changes to the spec at `path`, and drop the tables named in `drop`; written only
    if the result loads as a spec."""
    text = path.read_text()
    for table in drop:
        text = drop_table(text, table)
    for table, key, value in changes:
        text = set_key(text, table, key, value)
    scratch = path.with_name(f".{path.name}.new")
    scratch.write_text(text)
    try:
        _check(scratch, path.stem)
        scratch.replace(path)
    except AstraError:
        scratch.unlink(missing_ok=True)
        raise
    return text


def _check(scratch: Path, name: str) -> None:
    """Load the new text as the spec `name` (the scratch file's own stem differs from the spec's name)."""
    import tomllib

    from astra_sglang.specs.records import KernelSpec
    from astra_sglang.specs.registry import spec_error

    try:
        KernelSpec(**tomllib.loads(scratch.read_text()))
    except Exception as exc:  # noqa: BLE001 - pydantic, TOML: one line naming the field
        raise AstraError(f"updating the spec {name}: {spec_error(scratch, exc)}") from None
