"""Compile-only check: our kernels, the cheat / honest fixtures and the serving parity check's wrong patch build
for sm_90 through the harness's own build (harness/build.py: a copy in a scratch folder, local includes
inlined), and export the ABI's `astra_launch` symbol. (fixtures/faults/ is left out: broken.cu must not
compile.)"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
FIXTURES = Path(__file__).parent / "fixtures"
# Shipped patches compiled here that no variant op builds (tests/test_families_gpu.py runs them on a GPU).
OWN_PATCHES = [ROOT / "patches" / "rotary_embedding" / "kernel.cu"]
SOURCES = sorted(
    [*(ROOT / "astra_sglang" / "kernels").glob("*.cu"), *FIXTURES.glob("cheats/*.cu"), *FIXTURES.glob("honest/*.cu"),
     *FIXTURES.glob("wrong-patches/*/kernel.cu")]
) + OWN_PATCHES

pytestmark = [
    pytest.mark.nvcc,
    pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not found"),
]


def _exports_entry(library: str) -> bool:
    symbols = subprocess.run(["nm", "-D", "--defined-only", library], capture_output=True, text=True, check=True)
    return any(line.split()[-1] == "astra_launch" for line in symbols.stdout.splitlines() if line.strip())


@pytest.fixture
def build(tmp_path: Path, monkeypatch):
    """harness/build.build_library, as the harness builds a candidate (a copy in a scratch folder, its local
    includes inlined), into a cache of this test's own."""
    from astra_sglang.harness.build import build_library

    monkeypatch.setenv("ASTRA_SGLANG_CACHE", str(tmp_path / "cache"))
    return build_library


@pytest.mark.parametrize("source", SOURCES, ids=[f"{p.parent.name}/{p.name}" for p in SOURCES])
def test_kernel_compiles(source: Path, build) -> None:
    info = build(source, arch="sm_90")
    assert info.ok, f"build failed on {source.name}:\n{info.log}"
    assert _exports_entry(info.library)


def _variants():
    from astra_sglang.kernels.variants import VARIANTS

    return [(op, v.base, v.defines) for op, v in VARIANTS.items()]


@pytest.mark.parametrize("op, base, defines", _variants(), ids=[v[0] for v in _variants()])
def test_variant_kernels_compile(op, base, defines, build) -> None:
    """Each variant op's first kernel and shipped patch: the base op's files built with the variant's defines."""
    for source in (ROOT / "astra_sglang" / "kernels" / f"{base}.cu", ROOT / "patches" / base / "kernel.cu"):
        info = build(source, dict(defines), arch="sm_90")
        assert info.ok, f"build failed on {source} for {op}:\n{info.log[-3000:]}"
        assert _exports_entry(info.library)


# The merge patch's corner knob configurations: ORDER 1-2 cap registers at 40 only for one vector per lane
# (VPT 1); with VPT 4 that cap spilled 848 bytes, which the tuner would then have timed.
MERGE_CORNERS = [(512, 4, 1, 1), (64, 4, 1, 2), (256, 2, 1, 1), (128, 1, 1, 2), (128, 1, 1, 0)]


def test_merge_knob_corners_build_without_spills(tmp_path: Path, build) -> None:
    calls = "\n".join(f"    case {i}: return astra_launch_cfg<{', '.join(map(str, k))}>(tensors, num_tensors, scalars, "
                      "num_scalars, stream);" for i, k in enumerate(MERGE_CORNERS))
    source = tmp_path / "merge_corners.cu"
    entry = f"\nASTRA_ENTRY {{\n  switch (num_tensors - 6) {{\n{calls}\n    default: return ASTRA_UNSUPPORTED;\n  }}\n}}\n"
    kernel = (ROOT / "patches/merge_attn_states_lse/kernel.cu").read_text()
    source.write_text("#define ASTRA_NO_DEFAULT_ENTRY 1\n" + kernel + entry)
    info = build(source, arch="sm_90")
    assert info.ok, info.log[-2000:]
    assert info.spill_bytes in (None, 0), info.log[-2000:]


# The rope patch's corner knob configurations (THREADS, HPT, PDL): the most heads a thread at the largest and the
# smallest blocks, and the default entry's two.
ROPE_CORNERS = [(64, 1, 1), (256, 2, 1), (512, 4, 1), (64, 4, 1), (128, 2, 0)]


def test_rope_knob_corners_build_without_spills(tmp_path: Path, build) -> None:
    from astra_sglang.kernels.knobs import parse_knobs

    kernel = (ROOT / "patches/rotary_embedding/kernel.cu").read_text()
    knobs = {k.name: k.values for k in parse_knobs(kernel)}
    assert list(knobs) == ["THREADS", "HPT", "PDL"]
    assert all(t in knobs["THREADS"] and h in knobs["HPT"] for t, h, _ in ROPE_CORNERS)
    calls = "\n".join(f"    case {i}: return astra_launch_cfg<{', '.join(map(str, k))}>(tensors, num_tensors, scalars, "
                      "num_scalars, stream);" for i, k in enumerate(ROPE_CORNERS))
    source = tmp_path / "rope_corners.cu"
    entry = f"\nASTRA_ENTRY {{\n  switch ((int)scalars[1] % 8) {{\n{calls}\n    default: return ASTRA_UNSUPPORTED;\n  }}\n}}\n"
    source.write_text("#define ASTRA_NO_DEFAULT_ENTRY 1\n" + kernel + entry)
    info = build(source, arch="sm_90")
    assert info.ok, info.log[-2000:]
    assert info.spill_bytes in (None, 0), info.log[-2000:]


def test_group_quant_knob_configurations_build_without_spills(tmp_path: Path, build) -> None:
    """Every configuration the FP8 quant patch's knobs name (LANES x THREADS x PDL), in one build."""
    import itertools

    configs = list(itertools.product((8, 16), (64, 128, 256, 512), (0, 1)))
    calls = "\n".join(f"    case {i}: return astra_launch_cfg<{', '.join(map(str, k))}>(tensors, num_tensors, scalars, "
                      "num_scalars, stream);" for i, k in enumerate(configs))
    source = tmp_path / "group_quant_knobs.cu"
    entry = f"\nASTRA_ENTRY {{\n  switch ((int)scalars[2]) {{\n{calls}\n    default: return ASTRA_UNSUPPORTED;\n  }}\n}}\n"
    kernel = (ROOT / "patches/per_token_group_quant_fp8/kernel.cu").read_text()
    knobs = [line.split()[2:] for line in kernel.splitlines() if line.startswith("// astra:knob")]
    assert knobs == [["LANES", "8", "16"], ["THREADS", "64", "128", "256", "512"], ["PDL", "0", "1"]]
    source.write_text("#define ASTRA_NO_DEFAULT_ENTRY 1\n" + kernel + entry)
    info = build(source, arch="sm_90")
    assert info.ok, info.log[-2000:]
    assert info.spill_bytes in (None, 0), info.log[-2000:]
