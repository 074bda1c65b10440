"""Knobs derived from an extracted kernel's launch path: synthetic snippets (every kind of site, threading
through plain and template host functions, the one-line "no knob") and the real extracted sources of the
pinned sglang / flashinfer wheels, with nvcc compile-only checks of the knobbed source at two settings."""
from __future__ import annotations

import re

import pytest

from astra_sglang.extraction.knobgen import derive, write_knobbed
from astra_sglang.harness.build import build_library
from astra_sglang.kernels.knobs import DERIVED_MARK, dispatch_source, parse_knobs
from astra_sglang.specs.registry import get_spec

SYNTHETIC = {  # fixture -> the knobs derived from it: (name, kind, original, candidates)
    "all_kinds": [("BLOCK", "block", 256, (64, 128, 256, 512, 1024)), ("VEC", "template_arg", 4, (1, 2, 4, 8, 16)),
                  ("ITEMS", "constexpr", 4, (1, 2, 4, 8, 16)), ("UNROLL", "unroll", 2, (1, 2, 4, 8))],
    "plain_host": [("BLOCK", "block", 512, (64, 128, 256, 512, 1024))],
    "static_assert": [("BLOCK", "block", 128, (64, 128, 256, 512)), ("VEC", "template_arg", 2, (1, 2, 4, 8))],
}


@pytest.fixture
def knob_fixture(fixtures_dir):
    return lambda name: fixtures_dir / "knobs" / f"{name}.cu"


@pytest.mark.parametrize("name", sorted(SYNTHETIC))
def test_synthetic_sites_become_knobs(knob_fixture, name):
    d = derive(knob_fixture(name))
    assert [(k.name, k.kind, k.default, k.values) for k in d.knobs] == SYNTHETIC[name]
    assert d.source.count(DERIVED_MARK) == 1
    # the tuner reads what was derived, in order, and the default entry is the original's launch
    assert [(k.name, k.values) for k in parse_knobs(d.source)] == [(n, v) for n, _, _, v in SYNTHETIC[name]]
    defaults = ", ".join(str(v) for _, _, v, _ in SYNTHETIC[name])
    assert f"return astra_launch_cfg<{defaults}>(tensors, num_tensors, scalars, num_scalars, stream);" in d.source
    assert "static int astra_launch_cfg(" in d.source and "#ifndef ASTRA_NO_DEFAULT_ENTRY" in d.source
    for knob in d.knobs:  # every knob reaches the code (its site), not only the header
        assert re.search(rf"ASTRA_KNOB_{knob.name}\b", d.source.split("astra_launch_cfg(", 1)[0])


def test_knobs_are_threaded_through_the_launch_path(knob_fixture):
    kinds = derive(knob_fixture("all_kinds")).source
    assert "scale_kernel<T, ASTRA_KNOB_VEC, ASTRA_KNOB_ITEMS, ASTRA_KNOB_UNROLL><<<" in kinds
    assert "constexpr int ITEMS = ASTRA_KNOB_ITEMS;" in kinds and "#pragma unroll (ASTRA_KNOB_UNROLL)" in kinds
    assert "astra_launcher::launch<float, ASTRA_KNOB_BLOCK, ASTRA_KNOB_VEC, ASTRA_KNOB_ITEMS, ASTRA_KNOB_UNROLL>(" in kinds
    plain = derive(knob_fixture("plain_host")).source
    assert "template <int ASTRA_KNOB_BLOCK = 512>\nstatic cudaError_t go(" in plain
    assert "go<ASTRA_KNOB_BLOCK>(" in plain
    assert "std::min<unsigned>(static_cast<unsigned>(ASTRA_KNOB_BLOCK)" in plain  # 512u keeps its type


def test_no_derivable_knob_is_said_in_one_line(knob_fixture):
    d = derive(knob_fixture("no_knob"))
    assert not d.knobs and d.source == knob_fixture("no_knob").read_text()
    line = d.summary("no_knob.cu")
    assert line.startswith("no_knob.cu: no derivable knob in the launch path") and "\n" not in line
    assert "written into the launch itself" in line


def test_a_source_with_its_own_knobs_is_left_alone(tmp_path, knob_fixture):
    source = tmp_path / "k.cu"
    source.write_text("// astra:knob THREADS 64 128\n" + knob_fixture("all_kinds").read_text())
    assert write_knobbed(source)[0] is None and not (tmp_path / "knobbed.cu").exists()


def _compile_two_settings(knobbed: str, spec_name: str, shapes, settings, tmp_path):
    """The default entry, and a dispatch sending every shape to each non-default setting."""
    (tmp_path / "default.cu").write_text(knobbed)
    builds = {"default": build_library(tmp_path / "default.cu", arch="sm_90")}
    spec = get_spec(spec_name)
    for j, setting in enumerate(settings):
        path = tmp_path / f"setting{j}.cu"
        path.write_text(dispatch_source(spec, knobbed, parse_knobs(knobbed), {s: setting for s in shapes}, "test"))
        builds[setting] = build_library(path, arch="sm_90")
    return builds


@pytest.mark.nvcc
@pytest.mark.parametrize(("name", "setting"), [("all_kinds", (128, 2, 8, 4)), ("plain_host", (64,))])
def test_synthetic_knobbed_source_compiles_at_two_settings(knob_fixture, name, setting, tmp_path, monkeypatch):
    monkeypatch.setenv("ASTRA_SGLANG_CACHE", str(tmp_path / "cache"))
    builds = _compile_two_settings(derive(knob_fixture(name)).source, "silu_and_mul", [(1, 4096), (64, 11008)],
                                   [setting], tmp_path)
    assert all(b.ok for b in builds.values()), [b.log[-1500:] for b in builds.values() if not b.ok]


# --- the real extracted originals (pinned wheels, as tests/extraction/test_extract_real_sources.py) ---

REAL = {  # (op, source) -> derived knobs (name, original) and a non-default setting that must compile
    ("gelu_and_mul", "sglang"): ([("BLOCK", 256)], (128,), [(1, 4096), (77, 11008)]),
    ("rmsnorm", "flashinfer"): ([("BLOCK", 1024), ("VEC_BYTES", 16)], (256, 8), [(1, 4096), (33, 5120)]),
    ("fused_add_rmsnorm", "sglang"): ([("VEC_BYTES", 16)], (16,), [(1, 4096)]),
    ("merge_state", "flashinfer"): ([("VEC_BYTES", 16)], (8,), [(3, 32, 128)]),
}


@pytest.fixture(scope="module")
def extracted_sources(site_dir, tmp_path_factory):
    from astra_sglang.extraction.pipeline import extract

    return {key: extract(key[0], str(site_dir / key[1]), tmp_path_factory.mktemp("-".join(key))).kernel_cu
            for key in REAL}


@pytest.mark.parametrize("key", sorted(REAL))
def test_real_extracted_sources_derive_their_launch_knobs(extracted_sources, key):
    path, d = write_knobbed(extracted_sources[key])
    assert [(k.name, k.default) for k in d.knobs] == REAL[key][0], d.summary(str(key))
    assert path is not None and path.name == "knobbed.cu" and DERIVED_MARK in path.read_text()
    for k in d.knobs:
        if k.kind == "block":
            assert all(v % 32 == 0 and 64 <= v <= 1024 for v in k.values) and k.default in k.values
        else:  # vector widths divide the 16-byte alignment the launchers check
            assert all(16 % v == 0 for v in k.values) and k.default in k.values


def test_sglang_vector_width_follows_the_kernels_template_argument(extracted_sources):
    """kMaxVecBytes is the fused_add_rmsnorm kernel's template argument: every use on the path follows the knob;
    act_and_mul's kernel reads it itself, so there it is left alone (launcher and kernel must agree)."""
    fused = derive(extracted_sources[("fused_add_rmsnorm", "sglang")]).source
    launcher = fused.split("namespace astra_launcher {", 1)[1]
    assert "device::kMaxVecBytes" not in launcher
    assert "fused_add_rmsnorm_reg_kernel<false, T, ASTRA_KNOB_VEC_BYTES><<<" in launcher
    gelu = derive(extracted_sources[("gelu_and_mul", "sglang")])
    assert "device::kMaxVecBytes / sizeof(T)" in gelu.source.split("namespace astra_launcher {", 1)[1]
    assert [k.name for k in gelu.knobs] == ["BLOCK"]


@pytest.mark.nvcc
@pytest.mark.parametrize("key", [("gelu_and_mul", "sglang"), ("rmsnorm", "flashinfer")])
def test_real_knobbed_source_compiles_at_two_settings(extracted_sources, key, tmp_path, monkeypatch):
    monkeypatch.setenv("ASTRA_SGLANG_CACHE", str(tmp_path / "cache"))
    _, setting, shapes = REAL[key]
    builds = _compile_two_settings(derive(extracted_sources[key]).source, key[0], shapes, [setting], tmp_path)
    assert all(b.ok for b in builds.values()), [b.log[-1500:] for b in builds.values() if not b.ok]
