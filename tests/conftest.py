"""Markers: `gpu` tests are skipped without CUDA; `nvcc` tests (compile-only, run in CI) without nvcc.
Fixture `bench_script`: a script under benchmarks/ loaded as a module (they are scripts, not a package)."""
import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture
def bench_script():
    """bench_script("summarize") or bench_script("sass_diff"): the module, freshly executed."""
    def load(name: str):
        spec = importlib.util.spec_from_file_location(Path(name).name, BENCHMARKS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
        return module
    return load


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:  # noqa: BLE001
        return False


def pytest_collection_modifyitems(config, items):
    cuda, nvcc = _has_cuda(), shutil.which("nvcc") is not None
    for item in items:
        if "gpu" in item.keywords and not cuda:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU"))
        if "nvcc" in item.keywords and not nvcc:
            item.add_marker(pytest.mark.skip(reason="needs nvcc"))
