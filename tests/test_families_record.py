"""benchmarks/families_record.py on CPU: a families.sh run's rows into copies of the manifests, and its summary."""
from __future__ import annotations

import json

from astra_sglang.patchset.manifest import PatchManifest
from astra_sglang.paths import patches_dir
from astra_sglang.specs.registry import get_spec

OP = "gemma_rmsnorm"


def _row(shape, speedup=None, correct=True, dtype="bfloat16", timed=True):
    row = {"type": "shape", "kernel": OP, "shape": list(shape), "dtype": dtype, "correct": correct, "covered": True,
           "candidate_label": f"patches/{OP}", "reason": "" if correct else "mismatch at element 3"}
    if timed:
        row |= {"baseline_label": "py:sgl_kernel:gemma_rmsnorm", "speedup": speedup, "pct_roofline": 50.0,
                "candidate": {"median_us": 2.0}, "baseline": {"median_us": 2.0 * speedup}}
    else:
        row |= {"baseline_label": f"ours:{OP}"}
    return row


def _run(bench_script, tmp_path, checks):
    out = tmp_path / "out"
    out.mkdir()
    timed = [_row((1, 3584), 1.25), _row((64, 4608), 1.10), _row((8192, 3584), 0.98), _row((17, 2048), 1.3)]
    (out / "kernels-paper-quick-held_out.jsonl").write_text("".join(json.dumps(r) + "\n" for r in timed)
                                                             + json.dumps({"type": "summary", "kernel": OP}) + "\n")
    (out / "checks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in checks))
    (out / "per_call.jsonl").write_text(json.dumps({"op": OP, "shape": [1, 3584], "original_us": 9.0, "patched_us": 5.0,
                                                    "ratio": 0.556}) + "\n")
    module = bench_script("families_record")
    assert module.main([str(out), "NVIDIA H100", "2026-12-01", "H100, 2026-12-01, commit abc, `cmd`", OP]) == 0
    return out, PatchManifest.load(out / "manifests" / OP)


def test_records_the_timed_rows_and_the_largest_checked_call(bench_script, tmp_path):
    checks = [_row((3, 11), correct=True, dtype="float32", timed=False), _row((7, 8200), timed=False, dtype="float32")]
    shipped = (patches_dir() / OP / "manifest.json").read_text()
    out, manifest = _run(bench_script, tmp_path, checks)
    assert [(m.shape, m.speedup) for m in manifest.measured] == [((1, 3584), 1.25), ((64, 4608), 1.10),
                                                                 ((8192, 3584), 0.98), ((17, 2048), 1.3)]
    assert manifest.measured[0].baseline_us == 2.5 and manifest.baseline == "py:sgl_kernel:gemma_rmsnorm"
    spec = get_spec(OP)
    assert manifest.gate_max_bytes == max(spec.call_bytes((8192, 3584), "bfloat16"), spec.call_bytes((7, 8200), "float32"))
    assert manifest.enabled is False and manifest.kernel == "../rmsnorm/kernel.cu"
    assert manifest.defines == {"ASTRA_GEMMA": "1"}
    assert manifest.provenance.date == "2026-12-01" and manifest.provenance.gpu == "NVIDIA H100"
    assert "`measured`: H100, 2026-12-01, commit abc, `cmd`" in manifest.provenance.notes
    assert "none yet" not in manifest.provenance.notes  # the shipped clause was replaced, not appended to
    text = (out / "families.md").read_text()
    assert "| quick | 3 |" in text and "8192x3584 bfloat16 0.980" in text and "| 1x3584 | 9.00 | 5.00 | 0.556 |" in text
    assert (patches_dir() / OP / "manifest.json").read_text() == shipped  # the shipped manifest is left alone


def test_a_failed_check_leaves_no_gate_bound_and_is_listed(bench_script, tmp_path):
    out, manifest = _run(bench_script, tmp_path, [_row((5, 4100), correct=False, timed=False)])
    assert manifest.gate_max_bytes is None and len(manifest.measured) == 4
    assert "- FAILED 5x4100 bfloat16: mismatch at element 3" in (out / "families.md").read_text()
