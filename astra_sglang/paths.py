"""Where the project's data lives: specs (extract/), templates (harness_templates/), patches/, caches.

The top-level folders are mapped into the installed package (see pyproject.toml), so they resolve the
same way from a checkout (`pip install -e .`) and from a wheel.
"""
from __future__ import annotations

import os
from importlib import resources
from pathlib import Path


def _pkg_dir(name: str) -> Path:
    return Path(str(resources.files(name)))


def specs_dir() -> Path:
    return _pkg_dir("astra_sglang._extract")


def templates_dir() -> Path:
    return _pkg_dir("astra_sglang._templates")


def kernels_dir() -> Path:
    """Our own first kernels: the harness's baselines until extraction exists, test fixtures afterwards."""
    return _pkg_dir("astra_sglang.kernels")


def patches_dir() -> Path:
    return _pkg_dir("astra_sglang._patches")


def cache_dir() -> Path:
    """Build cache; override with ASTRA_SGLANG_CACHE."""
    root = os.environ.get("ASTRA_SGLANG_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "astra-sglang")
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path
