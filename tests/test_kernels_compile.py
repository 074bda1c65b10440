"""Compile-only check: our kernels and the cheat / honest fixtures build with nvcc for sm_90 and export
the ABI's `astra_launch` symbol. (fixtures/faults/ is left out: broken.cu must not compile.)"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
FIXTURES = Path(__file__).parent / "fixtures"
SOURCES = sorted(
    [*(ROOT / "astra_sglang" / "kernels").glob("*.cu"), *FIXTURES.glob("cheats/*.cu"), *FIXTURES.glob("honest/*.cu")]
)

pytestmark = [
    pytest.mark.nvcc,
    pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not found"),
]


@pytest.mark.parametrize("source", SOURCES, ids=[p.name for p in SOURCES])
def test_kernel_compiles(source: Path, tmp_path: Path) -> None:
    lib = tmp_path / "x.so"
    cmd = ["nvcc", "-std=c++17", "-O3", "-arch=sm_90", "-Xcompiler", "-fPIC", "-shared",
           "-I", str(ROOT / "harness_templates"), "-o", str(lib), str(source)]
    build = subprocess.run(cmd, capture_output=True, text=True)
    assert build.returncode == 0, f"nvcc failed on {source.name}:\n{build.stderr}"
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True, check=True)
    assert any(line.split()[-1] == "astra_launch" for line in symbols.stdout.splitlines() if line.strip())
