"""The commit a benchmark's figures name: ASTRA_COMMIT where the caller sets it (the GPU machine gets a copy of
the tree whose .git may be stale), else git's HEAD of the tree, else "unknown"."""
from __future__ import annotations

import os
import subprocess


def commit() -> str:
    given = os.environ.get("ASTRA_COMMIT", "").strip()
    if given:
        return given
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        head = ""
    return head or "unknown"


def command(script: str, argv: list[str], out) -> str:
    """The command line that reproduces a run, its output folder written OUT: a results page names no machine's
    path (`--out /tmp/x/bar --work /tmp/x/bar/work` -> `--out OUT --work OUT/work`)."""
    import shlex

    root = str(out).rstrip("/")
    words = [("OUT" + w[len(root):]) if w == root or w.startswith(root + "/") else w for w in argv]
    return shlex.join(["python3", script, *words])
