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


def _run(bench_script, tmp_path, checks, timed=None, summary=None, ratio=0.556, sanitized=True):
    out = tmp_path / "out"
    out.mkdir(parents=True)
    if sanitized is not None:  # benchmarks/memcheck.py --out's line for the op
        (out / "sanitize.jsonl").write_text(json.dumps({"op": OP, "ok": sanitized,
                                                        "reason": "" if sanitized else "exit code 1"}) + "\n")
    timed = timed or [_row((1, 3584), 1.25), _row((64, 4608), 1.10), _row((8192, 3584), 0.98), _row((17, 2048), 1.3)]
    summary = summary or {"type": "summary", "kernel": OP, "ok": True}
    (out / "kernels-paper-quick-held_out.jsonl").write_text("".join(json.dumps(r) + "\n" for r in timed)
                                                             + json.dumps(summary) + "\n")
    (out / "checks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in checks))
    (out / "per_call.jsonl").write_text(json.dumps({"op": OP, "shape": [1, 3584], "original_us": 9.0,
                                                    "patched_us": 9.0 * ratio, "ratio": ratio}) + "\n")
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
    assert manifest.enabled is True and manifest.kernel == "../rmsnorm/kernel.cu"
    assert "`gate`: enabled, geomean 1.150x against SGLang's op over 4 shapes, eager calls at most 0.556x " \
        "SGLang's time, compute-sanitizer memcheck and racecheck clean" in manifest.provenance.notes
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


def _verdict(manifest):
    why = manifest.provenance.notes.split("`gate`: ")[-1]
    assert manifest.off_reason == ("" if manifest.enabled else why.removeprefix("left off, "))
    return manifest.enabled, why


def test_a_patch_slower_per_call_is_left_off_with_the_figure(bench_script, tmp_path):
    """rope on the H200: kernel-only figures near 1x, eager calls 1.15-1.28x SGLang's."""
    out, manifest = _run(bench_script, tmp_path, [], ratio=1.271)
    assert _verdict(manifest) == (False, "left off, eager calls up to 1.271x SGLang's time at 1x3584 (geomean 1.150x "
                                         "kernel only)")
    assert "verdict: left off, eager calls up to 1.271x" in (out / "families.md").read_text()


def test_a_slower_geomean_is_left_off(bench_script, tmp_path):
    timed = [_row((1, 3584), 0.78), _row((64, 4608), 0.79), _row((8192, 3584), 1.14)]
    _, manifest = _run(bench_script, tmp_path, [], timed=timed)
    assert _verdict(manifest) == (False, "left off, geomean 0.889x against SGLang's op over 3 shapes")


def test_shapes_without_sglangs_figure_or_a_cut_evaluation_leave_it_off(bench_script, tmp_path):
    """FP8 quant on the H200: SGLang's op raised at every call, so its rows had candidate times only; and rope, whose
    timed evaluation was cut by the budget."""
    untimed = [_row((1, 7168), 1.0) | {"speedup": None, "baseline": None}, _row((64, 7168), 1.2)]
    _, manifest = _run(bench_script, tmp_path, [], timed=untimed)
    assert _verdict(manifest) == (False, "left off, 1 of 2 timed shapes have no figure of SGLang's op")
    cut = {"type": "summary", "kernel": OP, "ok": False, "stage": "timeout",
           "reason": "timed out after 44s after shape (1500, 16, 16, 64) bfloat16, 7 of 7 done"}
    _, manifest = _run(bench_script, tmp_path / "cut", [], summary=cut)
    assert _verdict(manifest) == (False, "left off, the timed step failed: timed out after 44s after shape "
                                         "(1500, 16, 16, 64) bfloat16, 7 of 7 done")


def test_a_shape_more_than_5_percent_slower_leaves_it_off(bench_script, tmp_path):
    """The acceptance gate's rule: a fast geomean does not carry a shape where SGLang's op is over 5% faster."""
    timed = [_row((1, 3584), 1.40), _row((64, 4608), 1.30), _row((8192, 3584), 0.94)]
    _, manifest = _run(bench_script, tmp_path, [], timed=timed)
    assert _verdict(manifest) == (False, "left off, 0.940x SGLang's op at 8192x3584 bfloat16 (geomean 1.196x)")


def test_fast_rows_wait_for_compute_sanitizer(bench_script, tmp_path):
    """topk_softmax on the H200: every figure passed, but no memcheck or racecheck had run: left off, saying so;
    a sanitizer finding leaves it off too; --candidates names the op for families.sh to sanitize."""
    out, manifest = _run(bench_script, tmp_path, [], sanitized=None)
    assert _verdict(manifest) == (False, "left off, geomean 1.150x against SGLang's op over 4 shapes, eager calls at "
                                         "most 0.556x SGLang's time, but compute-sanitizer memcheck and racecheck "
                                         "have not run")
    _, manifest = _run(bench_script, tmp_path / "found", [], sanitized=False)
    assert _verdict(manifest)[1].startswith("left off, compute-sanitizer memcheck or racecheck failed (exit code 1)")
    module = bench_script("families_record")
    assert module.candidates(out, [OP]) == [OP]
    slow = tmp_path / "slow"
    _run(bench_script, slow, [], ratio=1.2)
    assert module.candidates(slow / "out", [OP]) == []


def test_eager_calls_get_the_kernel_rules_room_for_noise(bench_script, tmp_path):
    """Eager calls 3% slower than SGLang's are within the 5% the kernel rule allows; 6% is not."""
    _, manifest = _run(bench_script, tmp_path, [], ratio=1.03)
    assert manifest.enabled
    _, manifest = _run(bench_script, tmp_path / "slow", [], ratio=1.06)
    assert _verdict(manifest)[1].startswith("left off, eager calls up to 1.060x SGLang's time")
