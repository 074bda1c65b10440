"""Fixtures of the patch-back tests: a patch folder whose targets live in small fake modules (SGLang binds
its kernel names only on CUDA builds), a CPU stand-in launcher, and SGLang's import chain on CPU (the
torchvision shim of tests/conftest.py)."""
from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))  # spawn_children is imported by name in spawned children

from patch_folders import write_patch  # noqa: E402 - found through the path above

FAKE_KERNELS = '''
import torch

def silu_and_mul(input, out=None):
    if out is None:
        out = input.new_empty(*input.shape[:-1], input.shape[-1] // 2)
    d = out.shape[-1]
    out.copy_(torch.nn.functional.silu(input[..., :d].double()) * input[..., d:].double())
    return out
'''
FAKE_LAYERS = '''
from astra_fake_kernels import silu_and_mul  # a `from x import f` copy, as SGLang's layers do

def forward(x):
    return silu_and_mul(x)
'''


@pytest.fixture(scope="session", autouse=True)
def _sglang_imports(torchvision_shim):
    """SGLang's import chain on CPU (tests/conftest.py's torchvision shim)."""
    yield torchvision_shim


@pytest.fixture
def fake_modules(tmp_path, monkeypatch):
    folder = tmp_path / "fakepkgs"
    folder.mkdir()
    (folder / "astra_fake_kernels.py").write_text(textwrap.dedent(FAKE_KERNELS))
    (folder / "astra_fake_layers.py").write_text(textwrap.dedent(FAKE_LAYERS))
    monkeypatch.syspath_prepend(str(folder))
    yield folder
    for name in ("astra_fake_kernels", "astra_fake_layers"):
        sys.modules.pop(name, None)


@pytest.fixture
def patch_dir(tmp_path):
    root = tmp_path / "patches"
    write_patch(root)
    return root


@pytest.fixture(autouse=True)
def fresh_runtime():
    from astra_sglang.patching import runtime

    runtime.reset()
    yield
    runtime.reset()
    runtime.set_launcher_factory(None)
