"""Markers: `gpu` tests are skipped without CUDA; `nvcc` tests (compile-only, run in CI) without nvcc."""
import shutil

import pytest


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
