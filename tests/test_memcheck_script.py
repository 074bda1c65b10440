"""benchmarks/memcheck.py on CPU: a verify that cannot run records why in --out's reason (what families_record.py
shows against a patch left disabled), not only its exit code, and the script names the failed op."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-GPU refusal is what this checks")
def test_a_failed_verify_records_its_last_line_as_the_reason(tmp_path):
    out = tmp_path / "sanitize.jsonl"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "memcheck.py"), "--patches", str(ROOT / "patches"),
                           "--out", str(out), "topk_softmax"], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])}, timeout=300)
    assert done.returncode == 1 and "failed: topk_softmax" in done.stderr
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert row == {"op": "topk_softmax", "ok": False,
                   "reason": "Error: patch verify needs a CUDA GPU; none is visible here"}
    assert row["reason"] in done.stdout  # the verify's own output passed through
