"""harness/sanitize.py on CPU: compute-sanitizer's driven program runs in a scratch folder, so what the request names
must still be found from there. A stand-in `compute-sanitizer` on PATH checks the request's source from its own
working folder and prints the summary the real one prints."""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from astra_sglang.harness import sanitize

STAND_IN = """#!/usr/bin/env bash
request=${@: -1}
source=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["source"])' "$request")
echo "$PWD" > "$(dirname "$0")/cwd.txt"
[ -f "$source" ] || { echo "AstraError: kernel source not found: $source"; echo "========= ERROR SUMMARY: 0 errors"; exit 1; }
echo "astra-sanitize: 3 launches"
echo "========= ERROR SUMMARY: 0 errors"
echo "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)"
"""


def test_a_source_named_relative_to_the_callers_folder_is_found_by_the_driven_program(tmp_path, monkeypatch):
    tool = tmp_path / "bin" / "compute-sanitizer"
    tool.parent.mkdir()
    tool.write_text(STAND_IN)
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    (tmp_path / "patches" / "op").mkdir(parents=True)
    (tmp_path / "patches" / "op" / "kernel.cu").write_text("// a kernel\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", f"{tool.parent}{os.pathsep}{os.environ['PATH']}")
    req = sanitize.SanitizeRequest(kernel="op", source="patches/op/kernel.cu", shapes=[(1, 8)], dtypes=["float16"])
    reports = sanitize.sanitize(req)
    assert [(r.tool, r.ran, r.ok, r.launches) for r in reports] == [("memcheck", True, True, 3),
                                                                    ("racecheck", True, True, 3)], reports
    assert Path((tool.parent / "cwd.txt").read_text().strip()) != tmp_path  # it did run elsewhere
    assert req.source == "patches/op/kernel.cu"  # the caller's request is left as it was
    assert json.loads(req.model_dump_json())["source"] == "patches/op/kernel.cu"
