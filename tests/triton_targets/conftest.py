"""Fixtures of the Triton tests: SGLang's own config lookup (its installed fused_moe_triton_config.py) on CPU,
on a named GPU, and a small fake of SGLang's configs folder."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

H100 = "NVIDIA H100 80GB HBM3"


@pytest.fixture(scope="session", autouse=True)
def _sglang_imports(torchvision_shim):
    yield torchvision_shim


@pytest.fixture
def sglang_lookup(monkeypatch):
    """SGLang's config module as the tuner loads it, on an H100 (CPU has no device name), lookups uncached."""
    from astra_sglang.triton.moe import configs as moe_configs

    module = moe_configs.sglang_module()
    monkeypatch.setattr(module, "get_device_name", lambda: H100)
    module.get_moe_configs.cache_clear()
    yield module
    module.get_moe_configs.cache_clear()


def config_table(block_m: int = 16) -> dict:
    return {str(m): {"BLOCK_SIZE_M": block_m, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1,
                     "num_warps": 4, "num_stages": 3} for m in (1, 64, 4096)}


@pytest.fixture
def fake_configs(tmp_path) -> Path:
    """<dir>/configs/triton_3_1_0 and triton_9_9_0 holding one file each, as SGLang's folder does."""
    root = tmp_path / "sglang-configs"
    for version, block_m in (("triton_3_1_0", 16), ("triton_9_9_0", 32)):
        folder = root / "configs" / version
        folder.mkdir(parents=True)
        name = f"E=8,N=512,device_name={H100.replace(' ', '_')}.json"
        (folder / name).write_text(json.dumps(config_table(block_m)))
    return root
