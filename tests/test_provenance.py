"""benchmarks/provenance.py: the commit a figure names, and the command that reproduces it with its output folder
written OUT, so that no results page names a machine's path."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import provenance  # noqa: E402


@pytest.mark.parametrize("argv, out, want", [
    (["--out", "/tmp/hs1/bar", "--work", "/tmp/moe-bar-work", "--preset", "qwen3-30b-a3b"], "/tmp/hs1/bar",
     "python3 b.py --out OUT --work /tmp/moe-bar-work --preset qwen3-30b-a3b"),
    (["--out", "/root/out/r/screen", "--work", "/root/out/r/screen/work"], "/root/out/r/screen/",
     "python3 b.py --out OUT --work OUT/work"),
    (["--out", "/tmp/x", "--ours", "/tmp/xy/ours.json"], "/tmp/x",  # a sibling that only starts alike stays
     "python3 b.py --out OUT --ours /tmp/xy/ours.json"),
    (["--shape", "8x14336x4096x2", "--note", "two words"], "o", "python3 b.py --shape 8x14336x4096x2 --note 'two words'"),
])
def test_the_command_names_its_output_folder_out(argv, out, want):
    assert provenance.command("b.py", argv, out) == want


def test_the_commit_is_the_callers_where_it_says(monkeypatch):
    monkeypatch.setenv("ASTRA_COMMIT", "abc1234")
    assert provenance.commit() == "abc1234"
