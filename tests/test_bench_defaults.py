"""`astra-sglang bench OP` with no --candidate / --baseline: the shipped patch against SGLang's own op where
SGLang imports, else against the tool's reference kernel, saying which; and the eager note. The evaluation
itself is faked (no GPU here): these tests check what is asked for and what is printed."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from astra_sglang.baselines import defaults
from astra_sglang.baselines.adapters import KERNEL_BASELINES
from astra_sglang.cli import main
from astra_sglang.cli.bench import eager_note
from astra_sglang.harness import isolate
from astra_sglang.harness.records import BuildInfo, EvalResult, ShapeResult, Timing
from astra_sglang.paths import kernels_dir, patches_dir

OPS = ["silu_and_mul", "fused_add_rmsnorm", "rmsnorm", "merge_attn_states_lse"]


def _row(shape, graph_us, eager_us):
    return ShapeResult(shape=shape, dtype="bfloat16", correct=True, candidate=Timing(
        median_us=graph_us, p10_us=graph_us, p90_us=graph_us), baseline=Timing(
        median_us=2 * graph_us, p10_us=2 * graph_us, p90_us=2 * graph_us), speedup=2.0,
        eager_candidate_us=eager_us, eager_baseline_us=eager_us)


@pytest.fixture
def bench(monkeypatch, tmp_path):
    """invoke(args, sglang=bool, gpu=bool) -> (CliResult, the EvalRequest bench built)."""
    seen = []

    def fake_evaluate(req):
        seen.append(req)
        return EvalResult(kernel=req.kernel, candidate=req.candidate.name(), baseline=req.baseline.name(), ok=True,
                          stage="done", build=BuildInfo(ok=True, seconds=0.5), gpu="fake GPU",
                          shapes=[_row((1, 4096), 2.0, 9.0), _row((8192, 4096), 40.0, 41.0)])

    monkeypatch.setattr(isolate, "evaluate", fake_evaluate)

    def invoke(args, sglang=True, gpu=True):
        monkeypatch.setattr(defaults, "missing_for", lambda op: None if sglang else "sglang")
        monkeypatch.setattr(defaults, "resolve_python", lambda path, option: None)  # SGLang's ops import (faked)
        monkeypatch.setattr("astra_sglang.cli.bench._has_gpu", lambda: gpu)
        res = CliRunner().invoke(main, ["bench", *args, "--shapes", "quick", "--out", str(tmp_path / "r.jsonl")])
        return res, seen[-1] if seen else None

    return invoke


@pytest.mark.parametrize("op", OPS)
def test_default_is_the_shipped_patch_against_sglangs_op(bench, op):
    res, req = bench([op])
    assert res.exit_code == 0, res.output
    manifest = json.loads((patches_dir() / op / "manifest.json").read_text())
    assert Path(req.candidate.path) == (patches_dir() / op / manifest["kernel"]).resolve()
    assert req.candidate.defines == manifest["defines"] and req.candidate.label == f"patches/{op}"
    assert req.baseline.path == KERNEL_BASELINES[op]
    first = res.output.splitlines()[0]
    shipped = "the shipped patch" + ("" if manifest["enabled"] else ", disabled in the patch set")
    assert first == f"{op}: patches/{op} ({shipped}) vs {KERNEL_BASELINES[op]} (SGLang's own op)"


@pytest.mark.parametrize("op", OPS)
def test_without_sglang_the_baseline_is_the_reference_kernel_with_a_note(bench, op):
    res, req = bench([op], sglang=False)
    assert res.exit_code == 0, res.output
    assert req.baseline.path == str(kernels_dir() / f"{op}.cu") and req.candidate.label == f"patches/{op}"
    first = res.output.splitlines()[0]
    assert "the shipped patch" in first and "the tool's reference kernel: sglang is not importable here" in first


def test_merge_state_builds_the_sibling_kernel_base2_and_says_it_ships_disabled(bench):
    res, req = bench(["merge_state"])
    assert res.exit_code == 0, res.output
    assert Path(req.candidate.path) == (patches_dir() / "merge_attn_states_lse" / "kernel.cu").resolve()
    assert req.candidate.defines == {"ASTRA_LSE_BASE2": "1"}
    assert "disabled in the patch set" in res.output.splitlines()[0]
    assert req.baseline.path == KERNEL_BASELINES["merge_state"]


def test_knobs_add_to_the_manifest_defines_and_explicit_sides_win(bench, tmp_path):
    res, req = bench(["merge_state", "-D", "ASTRA_DEFAULT_PDL=0"])
    assert req.candidate.defines == {"ASTRA_LSE_BASE2": "1", "ASTRA_DEFAULT_PDL": "0"}
    mine = tmp_path / "mine.cu"
    mine.write_text("// a candidate\n")
    res, req = bench(["rmsnorm", "--candidate", str(mine), "--baseline", "py:sgl_kernel:rmsnorm"], sglang=False)
    assert res.exit_code == 0, res.output
    assert req.candidate.path == str(mine) and req.candidate.defines == {}
    assert req.baseline.path == "py:sgl_kernel:rmsnorm"
    assert res.output.splitlines()[0] == f"rmsnorm: {mine} (given) vs py:sgl_kernel:rmsnorm (given)"


def test_baseline_keywords_sglang_and_reference(bench):
    res, req = bench(["rmsnorm", "--baseline", "sglang"])
    assert req.baseline.path == "py:sglang.srt.layers.layernorm:rmsnorm"
    res, req = bench(["rmsnorm", "--baseline", "reference", "--no-time"])
    assert req.baseline.path == str(kernels_dir() / "rmsnorm.cu") and req.time is False and req.check is True
    assert "vs ours:rmsnorm (the tool's reference kernel)" in res.output.splitlines()[0]


def test_no_check_and_no_time_together_is_an_error(bench):
    res, _ = bench(["rmsnorm", "--no-check", "--no-time"])
    assert res.exit_code == 1 and "nothing to do" in res.output


def test_a_patch_set_without_the_op_falls_back_to_the_reference_kernel(bench, monkeypatch, tmp_path):
    monkeypatch.setenv("ASTRA_SGLANG_PATCHES", str(tmp_path / "empty"))
    res, req = bench(["rmsnorm"])
    assert req.candidate.path == str(kernels_dir() / "rmsnorm.cu")
    assert "no patch for rmsnorm" in res.output.splitlines()[0]


def test_without_a_gpu_one_line_names_both_sides(bench):
    res, _ = bench(["rmsnorm"], sglang=False, gpu=False)
    assert res.exit_code == 1 and len(res.output.strip().splitlines()) == 1
    assert "no CUDA GPU here" in res.output and "patches/rmsnorm (the shipped patch) vs ours:rmsnorm" in res.output


@pytest.mark.parametrize("flag", ["--per-call", "--ncu"])
def test_per_call_and_ncu_say_in_one_line_what_they_need(bench, monkeypatch, flag):
    monkeypatch.setattr("shutil.which", lambda name: None)  # no ncu either
    res, req = bench(["rmsnorm", flag], gpu=False)
    assert res.exit_code == 1 and len(res.output.strip().splitlines()) == 1 and req is None
    assert "needs a CUDA GPU" in res.output
    res, _ = bench(["decode_attention", flag], gpu=True)  # an op neither knows how to run
    assert res.exit_code == 1 and "not decode_attention" in res.output
    res, _ = bench(["rmsnorm", "--per-call", "--ncu"])
    assert res.exit_code == 1 and "one at a time" in res.output


def test_per_call_times_the_ops_patch_from_the_set_launch_serves(bench, monkeypatch, tmp_path):
    from astra_sglang.serving import per_call

    calls = []
    monkeypatch.setattr(per_call, "main", lambda folder, tokens, patches, ops: calls.append(
        (folder, tokens, patches, ops)) or 0)
    res, req = bench(["silu_and_mul", "--per-call"])
    assert res.exit_code == 0 and req is None, res.output
    assert calls == [(tmp_path / "r.jsonl", per_call.TOKENS, None, ["silu_and_mul"])]


def test_ncu_profiles_the_patch_and_sglangs_op_at_the_shapes_asked_for(bench, monkeypatch, tmp_path):
    from astra_sglang.profile import ncu_table
    from astra_sglang.specs.registry import get_spec, resolve_shapes

    calls = []
    monkeypatch.setattr("shutil.which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(ncu_table, "main", lambda folder, items, patches: calls.append((folder, items, patches)))
    res, req = bench(["rmsnorm", "--ncu"])
    assert res.exit_code == 0 and req is None, res.output
    quick = [f"rmsnorm:{'x'.join(map(str, s))}" for s in resolve_shapes(get_spec("rmsnorm"), "quick")]
    assert calls == [(tmp_path / "r.jsonl", quick, patches_dir())]


def test_eager_note_only_where_the_host_sets_the_eager_time(bench):
    res, _ = bench(["rmsnorm"])
    note = [ln for ln in res.output.splitlines() if ln.startswith("eager is over")]
    assert note and "at 1 of 2 shapes" in note[0] and "eager measures the host" in note[0]
    quiet = EvalResult(kernel="rmsnorm", candidate="c", shapes=[_row((8192, 4096), 40.0, 41.0)])
    assert eager_note(quiet) == ""


def test_missing_for_names_the_first_absent_package(monkeypatch):
    present = {"sglang"}
    monkeypatch.setattr(defaults.importlib.util, "find_spec", lambda name: object() if name in present else None)
    assert defaults.missing_for("rmsnorm") == "sgl_kernel"
    assert defaults.missing_for("merge_state") == "flashinfer"
    present |= {"sgl_kernel", "flashinfer"}
    assert defaults.missing_for("rmsnorm") is None and defaults.missing_for("merge_state") is None
    present.clear()
    assert defaults.missing_for("silu_and_mul") == "sglang"


def test_group_quant_defaults_to_its_disabled_patch_against_sglangs_jit_kernel(bench):
    """per_token_group_quant_fp8: the shipped (still disabled) patch against the adapter that runs SGLang's JIT
    per_token_group_quant into the harness's buffers."""
    res, req = bench(["per_token_group_quant_fp8"])
    assert res.exit_code == 0, res.output
    assert Path(req.candidate.path) == (patches_dir() / "per_token_group_quant_fp8" / "kernel.cu").resolve()
    assert req.baseline.path == KERNEL_BASELINES["per_token_group_quant_fp8"]
    assert req.baseline.path == "py:astra_sglang.baselines.adapters:sglang_per_token_group_quant_fp8"
    assert res.output.splitlines()[0] == (
        "per_token_group_quant_fp8: patches/per_token_group_quant_fp8 (the shipped patch, disabled in the patch set) "
        "vs py:astra_sglang.baselines.adapters:sglang_per_token_group_quant_fp8 (SGLang's own op)")
