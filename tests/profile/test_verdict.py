"""The in-place verdict (profile --verdict): from the committed H100 profiles (unpatched and patched, 2026-11-24)
silu_and_mul is disabled with its figure and the norms kept; on hand-made profiles a patch slower only at
small sizes has its defer moved there, one slower at interleaved sizes is disabled; `launch` names a patch that
is off and why."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from astra_sglang.patchset.manifest import PatchManifest
from astra_sglang.patching.server_env import off_lines
from astra_sglang.patchset.store import PatchStore
from astra_sglang.paths import patches_dir
from astra_sglang.profile import verdict
from astra_sglang.cli.profile import profile
from astra_sglang.profile.compare import compare
from astra_sglang.profile.records import KernelRow, Phase, Profile
from astra_sglang.specs.profiled import OpShapes

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "2026-11-24-h100" / "profile"


@pytest.fixture
def patch_copy(tmp_path):
    folder = tmp_path / "patches"
    for op in ("silu_and_mul", "fused_add_rmsnorm", "rmsnorm"):
        shutil.copytree(patches_dir() / op, folder / op)
        manifest = PatchManifest.load(folder / op)
        manifest.model_copy(update={"enabled": True, "inplace": [], "off_reason": ""}).save(folder / op)
    return folder


def test_the_committed_profiles_disable_silu_and_mul_with_its_figure(tmp_path, patch_copy):
    res = CliRunner().invoke(profile, ["--report", str(RESULTS / "patched" / "profile.json"), "--compare",
                                       str(RESULTS / "base" / "profile.json"), "--verdict", "--patches",
                                       str(patch_copy), "--out", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    silu = PatchManifest.load(patch_copy / "silu_and_mul")
    assert not silu.enabled
    assert silu.off_reason.startswith("slower in place than SGLang's op: decode (64 tokens) 18.9 -> 22.4 us a step "
                                      "(+18.2%) (NVIDIA H100 80GB HBM3, 2026-11-24:")
    assert [(f.phase, f.rows) for f in silu.inplace] == [("decode", [64])]  # prefill: every call was deferred
    norm = PatchManifest.load(patch_copy / "fused_add_rmsnorm")
    assert norm.enabled and [f.phase for f in norm.inplace] == ["decode", "prefill"]
    assert norm.inplace[0].change_pct == pytest.approx(-18.3, abs=0.05)
    saved = json.loads((tmp_path / "out" / "verdict.json").read_text())
    assert {v["op"]: v["decision"] for v in saved} == {"fused_add_rmsnorm": "keep", "rmsnorm": "keep",
                                                       "silu_and_mul": "disable"}
    assert "off: silu_and_mul: slower in place" in off_lines(PatchStore(patch_copy))  # what `launch` prints


def test_verdict_needs_compare_and_a_patched_profile(tmp_path):
    res = CliRunner().invoke(profile, ["--report", str(RESULTS / "base" / "profile.json"), "--verdict"])
    assert res.exit_code == 2 and "--compare" in res.output
    res = CliRunner().invoke(profile, ["--report", str(RESULTS / "base" / "profile.json"), "--compare",
                                       str(RESULTS / "base" / "profile.json"), "--verdict", "--out",
                                       str(tmp_path)])
    assert res.exit_code != 0 and "needs a patched profile" in str(res.exception or res.output)


def _phase(name, tokens, kernel, per_step_us, shapes):
    return Phase(name=name, steps=10, step_wall_us=1000.0, gpu_us_per_step=1000.0, tokens_per_step=tokens,
                 rows=[KernelRow(name=kernel, kind="spec", op="silu_and_mul", calls=80, total_us=per_step_us * 10,
                                 per_step_us=per_step_us, share=0.01)],
                 ops=[OpShapes(op="silu_and_mul", dtype="bfloat16", shapes=shapes, calls=[80] * len(shapes))])


def _profiles(after_decode_us, after_prefill_us, prefill_shapes):
    base = Profile(date="d", gpu="g", phases=[_phase("decode", 16, "act_and_mul_kernel", 10.0, [(16, 4096)]),
                                              _phase("prefill", 64, "act_and_mul_kernel", 20.0, prefill_shapes)])
    after = Profile(date="d", gpu="g", patched=True, phases=[
        _phase("decode", 16, "silu_and_mul_kernel", after_decode_us, [(16, 4096)]),
        _phase("prefill", 64, "silu_and_mul_kernel", after_prefill_us, prefill_shapes)])
    return base, after


@pytest.mark.parametrize("decode_us, prefill_us, prefill_shapes, decision, field, value", [
    (12.0, 18.0, [(64, 4096)], "defer", "below_rows", 64),  # slower at 16 tokens, faster at 64
    (8.0, 24.0, [(64, 4096)], "defer", "min_bytes", 64 * 4096 * 3 * 2),  # slower above
    (9.9, 20.1, [(64, 4096)], "keep", None, None),  # within 2% either way
    (12.0, 18.0, [(8, 4096), (64, 4096)], "disable", None, None),  # slower at 16 between 8 and 64
])
def test_defer_moves_where_the_patch_is_slower(patch_copy, decode_us, prefill_us, prefill_shapes, decision, field,
                                               value):
    base, after = _profiles(decode_us, prefill_us, prefill_shapes)
    store = PatchStore(patch_copy)
    entry = store.get("silu_and_mul")
    found = verdict.decide(entry, verdict.phase_verdicts(entry, compare(base, after), after))
    assert found.decision == decision, found.reason
    verdict.apply(store, [found], "hand-made profiles")
    manifest = PatchManifest.load(patch_copy / "silu_and_mul")
    assert manifest.enabled is (decision != "disable")
    if field:
        assert getattr(manifest.defer, field) == value and "hand-made profiles" in manifest.defer.evidence
