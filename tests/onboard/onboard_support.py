"""What the onboard tests share beside their fixtures (conftest.py): where the committed calls files and the
stand-ins of flashinfer and sgl_kernel are, and the modules the tests import from their own folders."""
from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "onboard"
STANDINS = FIXTURES / "standins"
IMPORTED = ("flashinfer", "sgl_kernel", "astra_user_", "fakesgl", "mine_")
"""Modules the tests import from their own folders: forgotten after each test."""


def calls_file(name: str) -> str:
    return str(FIXTURES / f"{name}.calls.json")
