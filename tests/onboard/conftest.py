"""Fixtures of the onboard tests: a user folder of the test's own and the stand-ins of flashinfer and sgl_kernel
(tests/fixtures/onboard/standins), importable (`live`) or readable only from source (the real packages next to
CPU torch), and the recorded calls of tests/fixtures/onboard/."""
from __future__ import annotations

import sys

import pytest
from onboard_support import IMPORTED, STANDINS

from astra_sglang.paths import ENV_HOME
from astra_sglang.specs import registry

def _forget() -> None:
    for name in [m for m in sys.modules if m.startswith(IMPORTED)]:
        del sys.modules[name]


@pytest.fixture
def home(tmp_path, monkeypatch):
    """An empty user folder (HOME), the registry reloaded around the test, and no stand-in left imported."""
    monkeypatch.setenv(ENV_HOME, str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)  # extract's default folder (work/extract) is relative
    registry.reload()
    _forget()
    yield tmp_path / "home"
    _forget()
    registry.reload()


@pytest.fixture(params=["static", "live"])
def standins(request, home, monkeypatch):
    """The stand-ins on sys.path; "live": they import (as on a GPU machine), "static": their import fails
    (as next to CPU torch), so onboard reads their source."""
    monkeypatch.syspath_prepend(str(STANDINS))
    if request.param == "live":
        monkeypatch.setenv("ASTRA_STANDIN_IMPORTS", "1")
    else:
        monkeypatch.delenv("ASTRA_STANDIN_IMPORTS", raising=False)
    return request.param
