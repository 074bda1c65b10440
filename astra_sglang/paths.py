"""Where the project's data lives: the op specs (extract/, the specs extraction reads; installed as
astra_sglang._specs), templates (harness_templates/), patches/, caches, and the user folder (the user's own
specs and patches).

The top-level folders are mapped into the installed package (see pyproject.toml), so they resolve the
same way from a checkout (`pip install -e .`) and from a wheel.
"""
from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

from astra_sglang.errors import AstraError

_CHECKOUT_FOLDERS = {"astra_sglang._specs": "extract", "astra_sglang._templates": "harness_templates",
                     "astra_sglang._patches": "patches"}


def _pkg_dir(name: str) -> Path:
    # A checkout imported from its own folder (PYTHONPATH) uses its own data, even where another checkout is
    # installed in editable mode (whose finder maps these package names to that checkout's folders).
    root = Path(__file__).resolve().parent.parent
    local = root / _CHECKOUT_FOLDERS.get(name, "-")
    if local.is_dir() and (root / "pyproject.toml").is_file():
        return local
    return Path(str(resources.files(name)))


def specs_dir() -> Path:
    return _pkg_dir("astra_sglang._specs")


def templates_dir() -> Path:
    return _pkg_dir("astra_sglang._templates")


def kernels_dir() -> Path:
    """Our own first kernels: the harness's baselines until extraction exists, test fixtures afterwards."""
    return _pkg_dir("astra_sglang.kernels")


def patches_dir() -> Path:
    return _pkg_dir("astra_sglang._patches")


ENV_HOME = "ASTRA_SGLANG_HOME"
DEFAULT_HOME = "~/.astra-sglang"


def home_dir() -> Path:
    """The user folder (`--home` or ASTRA_SGLANG_HOME, default ~/.astra-sglang): the user's own op specs
    (specs/*.toml) and patches (patches/<op>/), never written into the installed package."""
    return Path(os.path.expanduser(os.environ.get(ENV_HOME) or DEFAULT_HOME))


def user_specs_dir() -> Path:
    return home_dir() / "specs"


def user_patches_dir() -> Path:
    return home_dir() / "patches"


def user_ops_dir() -> Path:
    """Reference modules `onboard` writes (importable by name while user specs load)."""
    return home_dir() / "ops"


def extract_dir(kernel: str, kind: str) -> Path:
    """Where `extract` writes an op's extraction from one source kind by default (kernel.cu, spec, provenance)."""
    return Path("work") / "extract" / f"{kernel}-{kind}"


def extracted_kernel(spec) -> tuple[Path, str] | None:
    """An earlier `extract` of the op into its default folder (kernel.cu, the source kind), the first of the
    spec's sources that has one. Here and not in extraction/: reading it needs no libclang."""
    for kind in spec.sources:
        path = extract_dir(spec.name, kind) / "kernel.cu"
        if path.is_file():
            return path, kind
    return None


def cache_dir() -> Path:
    """Build cache; override with ASTRA_SGLANG_CACHE."""
    root = os.environ.get("ASTRA_SGLANG_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "astra-sglang")
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def writable_folder(folder: Path, option: str) -> Path:
    """`folder`, created where missing, checked writable before a long run writes its results there; AstraError
    naming the option otherwise (a result that cannot be written is lost after the run)."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise AstraError(f"{option}: {folder} is a file, not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise AstraError(f"{option}: cannot create {folder}: {exc.strerror or exc}") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise AstraError(f"{option}: {folder} is not writable")
    return folder


def check_writable(path: Path, option: str) -> None:
    """AstraError unless `path` could be created (its nearest existing folder is writable), creating nothing:
    for a folder another process (a server's workers) writes later."""
    path = Path(path).resolve()
    parent = next((p for p in (path, *path.parents) if p.exists()), None)
    if parent is None or not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise AstraError(f"{option} {path}: {parent} is not a writable folder")
