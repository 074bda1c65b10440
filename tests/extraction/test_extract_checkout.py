"""merge_state_v2 lives only in sgl-kernel's AOT sources: extraction from a checkout, both layouts.

The tree is our own fixture code (tests/extraction/fixtures/aot_merge_attn_states.cu) laid out as an SGLang
checkout: sgl-kernel/csrc/... (older) and python/sglang/kernels/aot/csrc/... (newer).
"""
from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from astra_sglang.extraction.pipeline import extract

LAYOUTS = ("sgl-kernel", "python/sglang/kernels/aot")


def make_checkout(base, layout, fixtures_dir, source="aot_merge_attn_states.cu"):
    target = base / layout / "csrc" / "attention" / "merge_attn_states.cu"
    target.parent.mkdir(parents=True)
    shutil.copyfile(fixtures_dir / source, target)
    (base / layout / "include").mkdir()
    return base


@pytest.mark.parametrize("layout", LAYOUTS)
def test_checkout_layouts(tmp_path, layout, fixtures_dir):
    checkout = make_checkout(tmp_path / "sglang", layout, fixtures_dir)
    commit = ""
    if shutil.which("git"):
        git = ["git", "-C", str(checkout), "-c", "user.name=t", "-c", "user.email=t@t"]
        subprocess.run([*git, "init", "-q"], check=True)
        subprocess.run([*git, "add", "."], check=True)
        subprocess.run([*git, "commit", "-qm", "fixture"], check=True)
        commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    result = extract("merge_attn_states_lse", str(checkout), tmp_path / "out")
    assert result.source_kind == "sgl-kernel" and result.seconds < 10
    text = result.kernel_cu.read_text()
    assert "__global__ void merge_attn_states_kernel" in text
    assert "as_f32(__nv_bfloat16 x)" in text and "store_f32(half& dst" in text  # every overload
    assert "at::Tensor" not in text and "ATen" not in text  # torch host code and stub headers stay out
    prov = json.loads((result.out_dir / "provenance.json").read_text())
    assert prov["source"]["git_commit"] == commit
    assert list(prov["files"]) == ["csrc/attention/merge_attn_states.cu"]
    assert any("at" in d for d in prov["ignored_diagnostics"])  # torch-only code: recorded, not fatal


@pytest.mark.nvcc
def test_checkout_output_compiles(tmp_path, fixtures_dir, compile_cu):
    checkout = make_checkout(tmp_path / "sglang", LAYOUTS[1], fixtures_dir)
    result = extract("merge_attn_states_lse", str(checkout), tmp_path / "out")
    assert compile_cu(result.kernel_cu).is_file()
