"""The patch set on disk: listing, enable/disable, building through the (injected) builder."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from patch_folders import write_patch

from astra_sglang.errors import AstraError
from astra_sglang.patchset.store import PatchStore


def test_list_and_targets(patch_dir):
    write_patch(patch_dir, op="rmsnorm", targets=(), enabled=False)
    store = PatchStore(patch_dir)
    assert [e.op for e in store.entries()] == ["rmsnorm", "silu_and_mul"]
    assert [e.op for e in store.enabled()] == ["silu_and_mul"]
    # no manifest targets: the spec's sglang_targets
    assert [str(t) for t in store.get("rmsnorm").targets] == ["sglang.srt.layers.layernorm:rmsnorm"]
    assert store.get("silu_and_mul").speedup_geomean() == pytest.approx(1.5)


@pytest.mark.parametrize("defer, expected", [
    (None, (0.8 * 1.2 * 1.5) ** (1 / 3)),
    ({"below_rows": 16}, (1.0 * 1.2 * 1.5) ** (1 / 3)),  # 1 token left to SGLang's op: 1.0x as served
    ({"min_bytes": 2 * 8192 * 14336 * 2, "dtypes": ["bfloat16"]}, (0.8 * 1.2 * 1.0) ** (1 / 3)),
    ({"below_rows": 16, "dtypes": ["float32"]}, (0.8 * 1.2 * 1.5) ** (1 / 3))])  # another dtype: not deferred
def test_the_geomean_counts_deferred_shapes_as_sglangs(patch_dir, defer, expected):
    path = patch_dir / "silu_and_mul" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["measured"] = [{"shape": list(shape), "dtype": "bfloat16", "candidate_us": 1.0, "baseline_us": speed,
                             "speedup": speed} for shape, speed in (((1, 14336), 0.8), ((64, 14336), 1.2),
                                                                    ((8192, 14336), 1.5))]
    manifest["defer"] = {**defer, "evidence": "test"} if defer else None
    path.write_text(json.dumps(manifest))
    assert PatchStore(patch_dir).get("silu_and_mul").speedup_geomean() == pytest.approx(expected)


def test_enable_disable_persist(patch_dir):
    store = PatchStore(patch_dir)
    assert store.set_enabled("silu_and_mul", False).enabled is False
    assert json.loads((patch_dir / "silu_and_mul" / "manifest.json").read_text())["enabled"] is False
    assert PatchStore(patch_dir).enabled() == []
    store.set_enabled("silu_and_mul", True)
    assert [e.op for e in PatchStore(patch_dir).enabled()] == ["silu_and_mul"]


def test_errors(tmp_path, patch_dir):
    with pytest.raises(AstraError, match="no patch 'nope'"):
        PatchStore(patch_dir).get("nope")
    with pytest.raises(AstraError, match="not found"):
        PatchStore(tmp_path / "missing").entries()
    bad = write_patch(tmp_path / "bad", op="rmsnorm")
    (bad / "manifest.json").write_text("{not json")
    with pytest.raises(AstraError, match="invalid patch manifest"):
        PatchStore(tmp_path / "bad").entries()
    wrong = write_patch(tmp_path / "wrong", op="rmsnorm")
    (wrong.parent / "silu_and_mul").mkdir()
    (wrong.parent / "silu_and_mul" / "manifest.json").write_text((wrong / "manifest.json").read_text())
    with pytest.raises(AstraError, match="holds a manifest for op 'rmsnorm'"):
        PatchStore(tmp_path / "wrong").get("silu_and_mul")


def test_build_uses_builder(patch_dir):
    seen = []

    def builder(source, defines, arch):
        seen.append((source.name, defines, arch))
        return SimpleNamespace(ok=True, library="/x/kernel.so", log="")

    entry = PatchStore(patch_dir).get("silu_and_mul")
    assert str(PatchStore(patch_dir, builder=builder).build(entry, "sm_90")) == "/x/kernel.so"
    assert seen == [("kernel.cu", {}, "sm_90")]
    failing = PatchStore(patch_dir, builder=lambda *a: SimpleNamespace(ok=False, library="", log="a\nerror: boom"))
    with pytest.raises(AstraError, match="kernel build failed: error: boom"):
        failing.build(entry)
