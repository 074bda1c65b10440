"""benchmarks/sandwich_report.py on made-up in-place rows (no figure here is a measurement): which served
shapes it leaves to SGLang, the manifests it writes, the summary."""
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from astra_sglang.patchset.manifest import PatchManifest
from astra_sglang.paths import patches_dir
from astra_sglang.specs.registry import get_spec, resolve_shapes

SOURCE = "made up for a test"


def _row(op, shape, speedup, isolated=1.05):
    t = {"median_us": 40.0, "p10_us": 39.0, "p90_us": 41.0}
    return {"type": "shape", "kernel": op, "shape": list(shape), "dtype": "bfloat16", "correct": True, "covered": True,
            "speedup": isolated, "sandwich": {"model": "llama-3-8b", "before": "b", "after": "a", "repeats": 8,
                                              "gemms_us": t, "candidate_us": t, "baseline_us": t,
                                              "op_candidate_us": 2.0, "op_baseline_us": 2.0 * speedup,
                                              "speedup": speedup, "saved_us": 0.1}}


@pytest.fixture
def report(bench_script, tmp_path):
    shutil.copytree(patches_dir(), tmp_path / "patches", ignore=shutil.ignore_patterns("*.cu"))
    module = bench_script("sandwich_report")

    def run(rows, *extra):
        path = tmp_path / "rows.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        assert module.main([str(path), "--patches", str(tmp_path / "patches"), "--out", str(tmp_path / "s.md"),
                            *extra]) == 0
        return (tmp_path / "s.md").read_text()
    run.manifest = lambda op: PatchManifest.load(tmp_path / "patches" / op)
    return run


def _served(op, speedups):
    return [_row(op, s, speedups.get(s[0], 1.04)) for s in resolve_shapes(get_spec(op), "served")]


def test_slow_decode_sizes_are_deferred_below_a_row_count(report):
    text = report(_served("rmsnorm", {1: 0.95, 8: 0.98}), "--defer", "--source", SOURCE)
    defer = report.manifest("rmsnorm").defer
    spec = get_spec("rmsnorm")
    assert defer.below_rows == 9 and defer.min_bytes is None and SOURCE in defer.evidence
    assert defer.defers(spec, (8, 4096), "bfloat16") and not defer.defers(spec, (32, 4096), "bfloat16")
    assert "| rmsnorm | defer below 9 rows | 1x4096 bfloat16 0.950x, 8x4096 bfloat16 0.980x | none |" in text


def test_a_bound_the_manifest_has_is_kept_and_what_it_defers_is_not_judged(report, tmp_path):
    shipped = report.manifest("silu_and_mul")  # shipped off (slower in place); the report judges enabled patches
    shipped.enabled = True
    shipped.save(tmp_path / "patches" / "silu_and_mul")
    before = shipped.defer
    rows = _served("silu_and_mul", {128: 0.97, 8192: 0.5, 16384: 0.5})  # 8192+ tokens: already SGLang's
    report(rows, "--defer", "--source", SOURCE)
    defer = report.manifest("silu_and_mul").defer
    assert defer.min_bytes < before.min_bytes and defer.multiple_of == before.multiple_of
    assert before.evidence in defer.evidence and "8192x14336" not in defer.evidence.split(before.evidence)[1]
    assert defer.defers(get_spec("silu_and_mul"), (128, 14336), "bfloat16")


def test_slow_everywhere_disables_the_patch(report):
    report(_served("fused_add_rmsnorm", {t: 0.9 for t in (1, 8, 32, 128, 512, 2048, 8192, 16384)}), "--defer",
           "--source", SOURCE)
    manifest = report.manifest("fused_add_rmsnorm")
    assert not manifest.enabled and "disabled: in place" in manifest.provenance.notes


def test_fast_everywhere_changes_nothing(report, tmp_path):
    before = (tmp_path / "patches" / "gemma_rmsnorm" / "manifest.json").read_text()
    text = report(_served("gemma_rmsnorm", {}), "--defer", "--source", SOURCE)
    assert (tmp_path / "patches" / "gemma_rmsnorm" / "manifest.json").read_text() == before
    assert "| gemma_rmsnorm | keep | none | none |" in text


def test_without_defer_nothing_is_written_and_the_summary_lists_the_fixtures(report, tmp_path):
    before = (tmp_path / "patches" / "rmsnorm" / "manifest.json").read_text()
    (tmp_path / "fixtures.txt").write_text(
        "tests/evaluator/test_gpu_fixtures.py::test_every_cheat_is_rejected_for_its_reason[noop] PASSED [  4%]\n"
        "tests/evaluator/test_gpu_fixtures.py::test_declined_shapes_count_as_one FAILED [  8%]\n")
    text = report(_served("rmsnorm", {1: 0.9}), "--fixtures", str(tmp_path / "fixtures.txt"))
    assert (tmp_path / "patches" / "rmsnorm" / "manifest.json").read_text() == before
    assert "1 of 2 passed" in text and "| `test_every_cheat_is_rejected_for_its_reason[noop]` | PASSED |" in text
    assert "| rmsnorm | 1x4096 | bfloat16 | llama-3-8b: b, a | 1.050x | 2.00 / 1.80 | 0.900x | 0.10 | 40.0 |" in text


def test_defer_without_a_source_is_refused(report):
    with pytest.raises(SystemExit):
        report(_served("rmsnorm", {1: 0.9}), "--defer")


def test_the_gpu_script_times_every_enabled_patch_then_runs_the_gpu_tests(tmp_path):
    root = Path(__file__).parents[2]
    script = root / "benchmarks" / "gpu" / "evaluator.sh"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    env = {**os.environ, "DRY_RUN": "1", "PYTHONPATH": str(root), "MAX_TOKENS": "2048"}
    done = subprocess.run(["bash", str(script), str(tmp_path)], cwd=root, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    lines = (tmp_path / "commands.txt").read_text().splitlines()
    enabled = sorted(p.parent.name for p in patches_dir().glob("*/manifest.json")
                     if PatchManifest.load(p.parent).enabled)
    timed = [ln for ln in lines if "--sandwich" in ln]
    untimed = sorted(ln.split(":")[0] for ln in (tmp_path / "untimed.txt").read_text().splitlines())
    # an enabled patch whose spec has no sandwich (topk_softmax) is named, not silently skipped
    assert untimed == [op for op in enabled if get_spec(op).sandwich is None]
    assert sorted([ln.split(" bench ")[1].split()[0] for ln in timed] + untimed) == enabled
    assert all("--no-check" in ln and ",2048x" in ln and "8192x" not in ln for ln in timed)
    assert any("-m pytest -v" in ln and "-m gpu" in ln and ln.endswith("tests/evaluator") for ln in lines)
    assert lines[-1].startswith("python3 benchmarks/sandwich_report.py") and "--out" in lines[-1]
