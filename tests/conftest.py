"""Markers: `gpu` tests are skipped without CUDA; `nvcc` tests (compile-only, run in CI) without nvcc.
Fixture `bench_script`: a script under benchmarks/ loaded as a module (they are scripts, not a package).
Fixture `torchvision_shim`: SGLang's import chain on CPU where the installed torchvision cannot load."""
import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(autouse=True, scope="session")
def _user_folder(tmp_path_factory):
    """A user folder of the test run's own: commands that default to HOME (patches, specs) never read or
    write the real ~/.astra-sglang. A test wanting its own sets ASTRA_SGLANG_HOME itself."""
    import os

    old = os.environ.get("ASTRA_SGLANG_HOME")
    home = tmp_path_factory.mktemp("astra-home")
    os.environ["ASTRA_SGLANG_HOME"] = str(home)
    yield home
    if old is None:
        os.environ.pop("ASTRA_SGLANG_HOME", None)
    else:
        os.environ["ASTRA_SGLANG_HOME"] = old


@pytest.fixture(autouse=True)
def _no_user_patches_left(_user_folder):
    """A patch a test's command wrote into the run's user folder (`optimize`, `tune` default there) is gone
    before the next test: user patches win over the shipped ones (`bench`'s candidate, the tuner's start)."""
    yield
    shutil.rmtree(_user_folder / "patches", ignore_errors=True)


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


def _torchvision_loads() -> bool:
    if importlib.util.find_spec("torchvision") is None:
        return False
    try:
        import torchvision.io  # noqa: F401
        return True
    except Exception:  # noqa: BLE001 - a CUDA build against CPU torch
        for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
            del sys.modules[name]
        return False


@pytest.fixture(scope="session")
def torchvision_shim(tmp_path_factory):
    """sglang.srt.utils.common does `from torchvision.io import decode_jpeg` at import; registry torchvision
    wheels are CUDA builds that fail to load next to CPU torch. The shim provides just that name."""
    if _torchvision_loads():
        yield None
        return
    root = tmp_path_factory.mktemp("shim")
    (root / "torchvision").mkdir()
    (root / "torchvision" / "__init__.py").write_text("__version__ = '0.0.0+astra-test-shim'\n")
    (root / "torchvision" / "io.py").write_text("def decode_jpeg(*a, **k):\n    raise NotImplementedError\n")
    sys.path.insert(0, str(root))
    yield root
