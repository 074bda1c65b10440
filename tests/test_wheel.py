"""The package as a user installs it: a wheel built from the tree, installed (not editable) into a fresh venv,
run from a folder outside the checkout. Every module of the installed package imports, and the CLI answers
`--help`, `kernels` and `patch list` from the wheel's own specs and patches.

The venv sees the outer environment's site-packages (CPU torch, click, ...) through a path file, not through
--system-site-packages: that would also run the outer environment's .pth hooks, and an editable install of
this checkout there would then shadow the wheel. Marked `wheel` (about 10 s): `-m "not wheel"` skips it.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import site
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Not part of the source a wheel is built from: VCS data, caches, outputs.
SKIP = shutil.ignore_patterns(".git", "work", "runs", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache",
                              "astra-*", ".astra", "results")

pytestmark = pytest.mark.wheel


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 300) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(venv python, environment, a folder outside the checkout) with the wheel installed."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    shutil.copytree(ROOT, src, ignore=SKIP)  # the build writes build/ and *.egg-info: not into the checkout
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp / "dist"), str(src)]
    if importlib.util.find_spec("setuptools") is not None:
        build.insert(4, "--no-build-isolation")  # the environment's setuptools; no download
    _run(build, tmp, env)
    wheels = list((tmp / "dist").glob("astra_sglang-*.whl"))
    assert len(wheels) == 1, wheels
    venv.create(tmp / "venv", with_pip=False)
    python = tmp / "venv" / "bin" / "python"
    purelib = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp, env)
                   .strip())
    outer = [p for p in [*site.getsitepackages(), site.getusersitepackages()] if Path(p).is_dir()]
    (purelib / "outer-environment.pth").write_text("".join(f"{p}\n" for p in outer))
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "-q",
          str(wheels[0])], tmp, env)
    outside = tmp / "elsewhere"
    outside.mkdir()
    return python, env, outside


def test_every_module_imports_from_the_wheel(installed):
    python, env, outside = installed
    script = ("import importlib, pkgutil, astra_sglang\n"
              "print(astra_sglang.__file__)\n"
              "names = [m.name for m in pkgutil.walk_packages(astra_sglang.__path__, 'astra_sglang.')\n"
              "         if not m.name.endswith('.__main__')]  # that one runs the CLI\n"
              "for name in names:\n"
              "    importlib.import_module(name)\n"
              "print(len(names))\n")
    where, count = _run([str(python), "-c", script], outside, env).split()
    assert Path(where).is_relative_to(python.parent.parent), where  # the wheel's copy, not the checkout
    assert int(count) > 100


def test_the_cli_runs_from_the_wheel_with_its_own_data(installed):
    python, env, outside = installed
    cli = str(python.parent / "astra-sglang")
    assert "optimize" in _run([cli, "--help"], outside, env)
    kernels = _run([cli, "kernels"], outside, env)
    assert "silu_and_mul" in kernels and "fused_moe" in kernels
    patches = _run([cli, "patch", "list"], outside, env)
    assert "silu_and_mul" in patches and "enabled" in patches
    assert "fused_moe" in _run([cli, "tune", "--help"], outside, env)
    where = _run([str(python), "-c", "from astra_sglang.paths import specs_dir, patches_dir, templates_dir\n"
                  "print(specs_dir(), patches_dir(), templates_dir())"], outside, env).split()
    assert all(Path(p).is_relative_to(python.parent.parent) for p in where), where
