"""Shared fixtures for the extraction tests: pinned third-party wheels from the registry, nvcc helpers."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

HARNESS_INCLUDE = Path(__file__).resolve().parents[2] / "harness_templates"
FIXTURES = Path(__file__).parent / "fixtures"
# Pinned to the set matching the GPU machine's SGLang 0.5.17 (DESIGN.md).
WHEELS = {
    "sglang==0.5.17": ("sglang/kernels/jit/", "sglang/version.py", "sglang-0.5.17.dist-info/METADATA"),
    "flashinfer-python==0.6.15.post1": ("flashinfer/data/include/", "flashinfer/_build_meta.py",
                                        "flashinfer_python-0.6.15.post1.dist-info/METADATA"),
    "apache-tvm-ffi==0.1.11": ("tvm_ffi/include/",),
}


def wheel_cache() -> Path:
    root = os.environ.get("ASTRA_SGLANG_WHEELS") or os.path.expanduser("~/.cache/astra-sglang/wheels")
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def _wheel(requirement: str, cache: Path) -> Path:
    name, version = requirement.split("==")
    stem = name.replace("-", "_")
    found = sorted(cache.glob(f"{stem}-{version}-*.whl"))
    if not found:
        # A failed download fails the test run loudly (CI has the registry): never skip.
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                               requirement, "-d", str(cache)], capture_output=True, text=True)
        found = sorted(cache.glob(f"{stem}-{version}-*.whl"))
        if proc.returncode != 0 or not found:
            pytest.fail(f"pip download {requirement} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return found[-1]


@pytest.fixture(scope="session")
def site_dir() -> Path:
    """The kernel sources of the pinned wheels, unpacked side by side as in a site-packages folder."""
    cache = wheel_cache()
    site = cache / "site-astra-extract-v1"
    marker = site / ".complete"
    if not marker.is_file():
        shutil.rmtree(site, ignore_errors=True)
        for requirement, members in WHEELS.items():
            with zipfile.ZipFile(_wheel(requirement, cache)) as zf:
                for member in zf.namelist():
                    if member.startswith(members):
                        zf.extract(member, site)
        marker.write_text("ok\n")
    return site


def nvcc() -> str:
    path = shutil.which("nvcc")
    if not path:
        pytest.skip("nvcc not found")
    return path


def nvcc_compile(source: Path, std: str = "c++17", ptx: bool = False, extra: tuple[str, ...] = ()) -> Path:
    """Plain nvcc, as the issue requires: only -std, -arch, shared/PIC (or --ptx) and the ABI include."""
    out = source.with_suffix(".ptx" if ptx else ".so")
    mode = ["--ptx"] if ptx else ["-shared", "-Xcompiler", "-fPIC"]
    cmd = [nvcc(), f"-std={std}", "-arch=sm_90", *mode, "-I", str(HARNESS_INCLUDE), *extra, str(source), "-o", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"nvcc failed on {source}:\n{proc.stderr[-4000:]}"
    return out


@pytest.fixture
def compile_cu():
    return nvcc_compile


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return FIXTURES
