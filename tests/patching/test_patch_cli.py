"""CLI: patch list/enable/disable/record/verify, report, launch --dry-run, and their error paths."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from patch_folders import write_patch

from astra_sglang.cli import launch
from astra_sglang.cli import patch as cli
from astra_sglang.patching.stats import OpStats, StatsWriter


@pytest.fixture
def run():
    runner = CliRunner()
    return lambda command, *args: runner.invoke(command, [str(a) for a in args])


def test_list(run, patch_dir):
    write_patch(patch_dir, op="rmsnorm", targets=(), enabled=False)
    result = run(cli.patch_group, "list", "--patches", patch_dir)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].split()[:3] == ["op", "enabled", "method"]
    assert any(line.startswith("silu_and_mul") and "yes" in line and "1.50x" in line for line in lines)
    assert any(line.startswith("rmsnorm") and " no " in line and "sglang.srt.layers.layernorm:rmsnorm" in line
               for line in lines)


def test_list_shows_where_the_original_is_kept_and_refuses_stray_defer_dtypes(run, patch_dir):
    path = patch_dir / "silu_and_mul" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["defer"] = {"min_bytes": 12_000_000, "dtypes": ["bfloat16"], "evidence": "test"}
    path.write_text(json.dumps(manifest))
    result = run(cli.patch_group, "list", "--patches", patch_dir)
    assert result.exit_code == 0, result.output
    assert "original kept" in result.output.splitlines()[0]
    assert ">= 12 MB" in [line for line in result.output.splitlines() if line.startswith("silu_and_mul")][0]
    manifest["defer"]["dtypes"] = ["float16"]  # not a dtype this patch covers
    path.write_text(json.dumps(manifest))
    result = run(cli.patch_group, "list", "--patches", patch_dir)
    assert result.exit_code == 1 and "defer dtypes ['float16'] not in the patch's" in result.output


def test_list_empty_and_missing(run, tmp_path):
    (tmp_path / "empty").mkdir()
    assert "no patches" in run(cli.patch_group, "list", "--patches", tmp_path / "empty").output
    result = run(cli.patch_group, "list", "--patches", tmp_path / "missing")
    assert result.exit_code == 1 and "patch folder not found" in result.output


def _bench_row(op, shape, speedup, candidate="patches/{op}", baseline="py:sgl_kernel:silu_and_mul"):
    return {"type": "shape", "kernel": op, "shape": list(shape), "dtype": "bfloat16", "speedup": speedup,
            "candidate_label": candidate.format(op=op), "baseline_label": baseline, "pct_roofline": 80.0,
            "candidate": {"median_us": 2.0}, "baseline": {"median_us": 2.0 * speedup}, "correct": True}


@pytest.mark.parametrize("notes, expect", [
    ("test", "test; `measured`: H100, commit abc"),  # a clause is added where the notes have none
    ("hand-written; `measured`: old run; kept", "hand-written; `measured`: H100, commit abc; kept"),  # replaced
])
def test_record_writes_the_rows_timed_against_sglang_into_the_manifest(run, patch_dir, tmp_path, notes, expect):
    path = patch_dir / "silu_and_mul" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["provenance"]["notes"] = notes
    path.write_text(json.dumps(manifest))
    rows = tmp_path / "kernels.jsonl"
    rows.write_text("".join(json.dumps(r) + "\n" for r in [
        _bench_row("silu_and_mul", (1, 14336), 1.25), _bench_row("silu_and_mul", (7, 11), 0.9),
        _bench_row("silu_and_mul", (64, 4096), 2.0, candidate="my.cu"),  # not the shipped patch
        _bench_row("silu_and_mul", (64, 4096), 2.0, baseline="ours:silu_and_mul"),  # not SGLang's op
        {"type": "summary", "kernel": "silu_and_mul"}]))
    result = run(cli.patch_group, "record", rows, "--patches", patch_dir, "--gpu", "NVIDIA H100", "--date",
                 "2026-12-01", "--source", "H100, commit abc")
    assert result.exit_code == 0, result.output
    assert "silu_and_mul: 2 measured shapes recorded" in result.output
    saved = json.loads(path.read_text())
    assert [(m["shape"], m["speedup"], m["baseline_us"]) for m in saved["measured"]] == [([1, 14336], 1.25, 2.5),
                                                                                          ([7, 11], 0.9, 1.8)]
    assert saved["baseline"] == "py:sgl_kernel:silu_and_mul" and saved["enabled"] is True
    provenance = saved["provenance"]
    assert (provenance["date"], provenance["gpu"], provenance["method"]) == ("2026-12-01", "NVIDIA H100", "hand")
    assert saved["provenance"]["notes"] == expect and saved["targets"] == manifest["targets"]


def test_record_refuses_rows_it_cannot_place(run, patch_dir, tmp_path):
    rows = tmp_path / "kernels.jsonl"
    rows.write_text(json.dumps(_bench_row("silu_and_mul", (1, 8), 1.1, baseline="ours:silu_and_mul")) + "\n")
    args = ["--patches", patch_dir, "--gpu", "G", "--date", "2026-12-01"]
    result = run(cli.patch_group, "record", rows, *args)
    assert result.exit_code == 1 and "no row in" in result.output and "against SGLang's own op" in result.output
    rows.write_text(json.dumps(_bench_row("rmsnorm", (1, 8), 1.1)) + "\n")
    result = run(cli.patch_group, "record", rows, *args)
    assert result.exit_code == 1 and "no patch rmsnorm in" in result.output
    rows.write_text("{not json\n")
    result = run(cli.patch_group, "record", rows, *args)
    assert result.exit_code == 1 and "not bench JSONL rows" in result.output


def test_enable_disable(run, patch_dir):
    result = run(cli.patch_group, "disable", "silu_and_mul", "--patches", patch_dir)
    assert result.exit_code == 0 and "silu_and_mul: disabled" in result.output
    assert json.loads((patch_dir / "silu_and_mul" / "manifest.json").read_text())["enabled"] is False
    assert run(cli.patch_group, "enable", "silu_and_mul", "--patches", patch_dir).exit_code == 0
    assert json.loads((patch_dir / "silu_and_mul" / "manifest.json").read_text())["enabled"] is True


def test_enable_unknown(run, patch_dir):
    result = run(cli.patch_group, "enable", "nope", "--patches", patch_dir)
    assert result.exit_code == 1 and "no patch 'nope'" in result.output and "silu_and_mul" in result.output


def test_verify_without_gpu(run, patch_dir):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    result = run(cli.patch_group, "verify", "silu_and_mul", "--patches", patch_dir)
    assert result.exit_code == 1 and "needs a CUDA GPU" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_launch_dry_run_import_hook(run, tmp_path, monkeypatch):
    root = tmp_path / "p"
    write_patch(root, targets=("sglang.srt.layers.layernorm:rmsnorm",))  # resolved statically in the pinned SGLang
    result = run(launch.launch_cmd, "--patches", root, "--mechanism", "import-hook", "--no-build", "--verify-rate",
                 "0.01", "--stats-dir", tmp_path / "st", "--dry-run", "--", "--model-path", "m", "--port", "1")
    assert result.exit_code == 0, result.output
    out = result.output
    assert "via import-hook" in out and "ASTRA_SGLANG_TARGET_MODULES=sglang.srt.layers.layernorm" in out
    assert "ASTRA_SGLANG_VERIFY_RATE=0.01" in out and "PYTHONPATH=" in out
    assert out.strip().splitlines()[-1].endswith("-m sglang.launch_server --model-path m --port 1")


def test_launch_auto_picks_import_hook_without_entry_point(run, tmp_path, monkeypatch):
    monkeypatch.setattr(launch.hook, "plugin_available", lambda: False)
    root = tmp_path / "p"
    write_patch(root, targets=("sglang.srt.layers.activation:silu_and_mul",))
    result = run(launch.launch_cmd, "--patches", root, "--no-build", "--dry-run", "--", "--model-path", "m")
    assert result.exit_code == 0 and "via import-hook" in result.output
    result = run(launch.launch_cmd, "--patches", root, "--mechanism", "plugin", "--no-build", "--dry-run")
    assert result.exit_code == 1 and "plugin mechanism needs" in result.output


def test_launch_plugin_extends_allow_list(run, tmp_path, monkeypatch):
    monkeypatch.setattr(launch.hook, "plugin_available", lambda: True)
    monkeypatch.setenv("SGLANG_PLUGINS", "other")
    root = tmp_path / "p"
    write_patch(root, targets=("sglang.srt.layers.activation:silu_and_mul",))
    result = run(launch.launch_cmd, "--patches", root, "--no-build", "--dry-run")
    assert result.exit_code == 0 and "via plugin" in result.output
    assert "SGLANG_PLUGINS=other,astra_sglang" in result.output


def test_launch_errors(run, tmp_path):
    root = tmp_path / "p"
    write_patch(root, targets=("sglang.srt.layers.layernorm:not_a_kernel",))
    result = run(launch.launch_cmd, "--patches", root, "--no-build", "--dry-run")
    assert result.exit_code == 1 and "not_a_kernel" in result.output
    write_patch(root, targets=("sglang.srt.layers.layernorm:rmsnorm",), enabled=False)
    result = run(launch.launch_cmd, "--patches", root, "--no-build", "--dry-run")
    assert result.exit_code == 1 and "no enabled patches" in result.output
    result = run(launch.launch_cmd, "--patches", root, "--verify-rate", "2", "--dry-run")
    assert result.exit_code == 2


def test_report(run, tmp_path):
    writer = StatsWriter(tmp_path / "run1", "plugin", interval_s=0)
    stats: OpStats = writer.op("silu_and_mul")
    stats.calls, stats.kernel_calls, stats.deferred, stats.shadow_checks = 10, 8, 1, 2
    stats.add_timing(2.0, 3.0)
    writer.write()
    result = run(cli.report_cmd, "--stats-dir", tmp_path)  # the newest run folder inside
    assert result.exit_code == 0, result.output
    row = [line for line in result.output.splitlines() if "silu_and_mul" in line][0].split()
    assert row[1:8] == ["plugin", "silu_and_mul", "10", "8", "0", "1", "0/2"] and row[8] == "2.0/3.0"
    result = run(cli.report_cmd, "--stats-dir", tmp_path / "nothing")
    assert result.exit_code == 1 and "no astra-sglang stats" in result.output


def test_launch_refuses_a_patch_for_other_sglang_versions(run, tmp_path):
    import json

    root = tmp_path / "p"
    folder = write_patch(root, targets=("sglang.srt.layers.layernorm:rmsnorm",))
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["sglang_versions"] = ">=9.0"  # the pinned test SGLang is 0.5.17
    (folder / "manifest.json").write_text(json.dumps(manifest))
    result = run(launch.launch_cmd, "--patches", root, "--no-build", "--dry-run")
    assert result.exit_code == 1 and "targets sglang>=9.0, installed is 0.5.17" in result.output


@pytest.mark.parametrize("reports, expect", [
    ([("memcheck", True, True, 0, ""), ("racecheck", True, True, 0, "")], "racecheck clean over 40 launches"),
    ([("memcheck", True, False, 2, "Invalid __global__ write of size 4\nat kernel+0x40")],
     "error: patch rmsnorm: compute-sanitizer memcheck found 2 problem(s): Invalid __global__ write of size 4"),
    ([("memcheck", True, False, 0, "the driven program exited with code 1: AstraError: kernel source not found")],
     "error: patch rmsnorm: compute-sanitizer memcheck did not finish: the driven program exited with code 1"),
    ([("memcheck", False, False, 0, "compute-sanitizer not found")],
     "error: compute-sanitizer memcheck could not check rmsnorm here: compute-sanitizer not found"),
])
def test_verify_sanitize_runs_the_harness_sanitizer_over_the_patch(monkeypatch, reports, expect):
    from astra_sglang.errors import AstraError
    from astra_sglang.harness import sanitize
    from astra_sglang.patchset.store import PatchStore
    from astra_sglang.paths import patches_dir
    from astra_sglang.specs.registry import resolve_shapes

    asked = []

    def fake(req):
        asked.append(req)
        return [sanitize.SanitizerReport(tool=t, ran=ran, ok=ok, findings=n, launches=40, detail=d)
                for t, ran, ok, n, d in reports]

    monkeypatch.setattr(sanitize, "sanitize", fake)
    entry = PatchStore(patches_dir()).get("rmsnorm")
    said = []
    try:
        cli.sanitize_patch(entry, echo=said.append)
        said = "\n".join(said)
    except AstraError as exc:
        said = f"error: {exc}"
    assert expect in said
    assert "\n" not in said if said.startswith("error:") else len(said.splitlines()) == 2  # a line per tool
    req = asked[0]
    assert req.kernel == "rmsnorm" and req.source == str(entry.kernel_path) and req.dtypes == entry.manifest.dtypes
    assert req.shapes == sanitize.small_shapes(entry.spec, resolve_shapes(entry.spec, "edge+held_out+quick+paper"))
    assert (1, 4096) in req.shapes


def test_verify_sanitize_is_for_cuda_patches(run, tmp_path):
    folder = write_patch(tmp_path / "patches", op="fused_moe", targets=())
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest |= {"kind": "triton-config", "dtypes": ["bfloat16"]}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    result = run(cli.patch_group, "verify", "fused_moe", "--patches", tmp_path / "patches", "--sanitize")
    assert result.exit_code == 1 and "--sanitize checks CUDA kernels; fused_moe is a triton-config patch" in result.output
