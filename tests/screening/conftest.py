"""The screening tests read SGLang's config files and lookup on CPU: its import chain needs the torchvision shim."""
import pytest


@pytest.fixture(scope="session", autouse=True)
def _sglang_imports(torchvision_shim):
    yield torchvision_shim
