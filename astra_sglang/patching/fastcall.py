"""Build and load the C++ fast path of patched ops (fastcall.cpp) against the running torch.

The kernel libraries themselves stay free of torch headers (harness/build.py); only this small module
includes them, once per (torch, Python, compiler) on a machine, cached like the kernels. Building takes
~20-40 s the first time. Where it cannot be built (no C++ compiler, no Python headers, a torch without
its headers), patched ops keep the Python/ctypes path and one warning says why.
"""
from __future__ import annotations

import functools
import glob
import hashlib
import importlib.machinery
import importlib.util
import json
import logging
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from types import ModuleType

from astra_sglang.errors import AstraError
from astra_sglang.paths import cache_dir, templates_dir
from astra_sglang.specs.records import compile_dim, dim_names

log = logging.getLogger("astra_sglang.patching")

SOURCE = Path(__file__).with_name("fastcall.cpp")
ENV_FASTCALL = "ASTRA_SGLANG_FASTCALL"
""""0" keeps every patched op on the Python/ctypes path."""
BUILD_TIMEOUT_S = 300


def enabled() -> bool:
    return os.environ.get(ENV_FASTCALL, "1") != "0"


def _cuda_include() -> str | None:
    """cuda_runtime.h's folder: CUDA_HOME, next to nvcc, or the usual install places."""
    from astra_sglang.harness.build import nvcc_path

    candidates = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")]
    try:
        candidates.append(str(Path(nvcc_path()).resolve().parent.parent))
    except AstraError:
        pass
    candidates += ["/usr/local/cuda", *sorted(glob.glob("/usr/local/cuda-*"), reverse=True)]
    for home in filter(None, candidates):
        if Path(home, "include", "cuda_runtime.h").is_file():
            return str(Path(home, "include"))
    return None


def compile_command(output: Path | None, *, syntax_only: bool = False) -> list[str]:
    """The compiler command line (`syntax_only`: check the source, build nothing)."""
    import torch
    from torch.utils.cpp_extension import include_paths, library_paths

    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if not cxx:
        raise AstraError("no C++ compiler (c++/g++) for the fast path")
    cuda_include = _cuda_include()
    if cuda_include is None:
        raise AstraError("no CUDA headers (cuda_runtime.h) for the fast path")
    python_include = sysconfig.get_paths()["include"]
    if not Path(python_include, "Python.h").is_file():
        raise AstraError(f"no Python headers in {python_include} (install the python3-dev package)")
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    flags = ["-O2", "-std=c++17", "-fPIC", "-w", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
             *(f"-I{p}" for p in include_paths()), f"-I{python_include}", f"-I{cuda_include}", f"-I{templates_dir()}"]
    if syntax_only:
        return [cxx, *flags, "-fsyntax-only", str(SOURCE)]
    lib = library_paths()[0]
    return [cxx, *flags, "-shared", str(SOURCE), "-o", str(output), f"-L{lib}", "-lc10", "-ltorch_cpu",
            "-ltorch_python", f"-Wl,-rpath,{lib}"]


def _key() -> str:
    import torch

    blob = json.dumps([SOURCE.read_text(), (templates_dir() / "astra_abi.h").read_text(), torch.__version__,
                       sys.version, os.environ.get("CXX", "")])
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def build() -> Path:
    """The cached extension for this torch and Python; AstraError with the compiler's last lines on failure."""
    folder = cache_dir() / "fastcall" / _key()
    library = folder / "astra_fastcall.so"
    if library.is_file():
        return library
    with tempfile.TemporaryDirectory(prefix="astra-fastcall-") as tmp:
        out = Path(tmp) / "astra_fastcall.so"
        try:
            proc = subprocess.run(compile_command(out), capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise AstraError(f"fast path build timed out after {BUILD_TIMEOUT_S}s") from None
        if proc.returncode != 0 or not out.is_file():
            tail = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
            raise AstraError("fast path build failed: " + " | ".join(tail))
        folder.mkdir(parents=True, exist_ok=True)
        staged = folder / f"astra_fastcall.so.{os.getpid()}"
        shutil.copyfile(out, staged)
        os.replace(staged, library)  # concurrent workers building the same key both end with a whole file
    return library


def _import(path: Path) -> ModuleType:
    loader = importlib.machinery.ExtensionFileLoader("astra_fastcall", str(path))
    spec = importlib.util.spec_from_file_location("astra_fastcall", str(path), loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


@functools.cache
def load() -> ModuleType | None:
    """The fast-path module, or None (with one warning) where it is disabled or cannot be built."""
    if not enabled():
        return None
    try:
        import torch  # noqa: F401 - its libraries must be loaded before the extension

        return _import(build())
    except (AstraError, ImportError, OSError) as exc:
        log.warning("astra-sglang: C++ fast path unavailable, patched ops use the Python path: %s", exc)
        return None


def _affine(expr, name: str) -> tuple[int, int] | None:
    """(a, b) with expr = a * name + b, or None where the expression is not affine in that one dim."""
    if dim_names(expr) != [name]:
        return None
    fn = compile_dim(expr)
    b = fn({name: 0})
    a = fn({name: 1}) - b
    return (a, b) if a and all(fn({name: x}) == a * x + b for x in (2, 7, 1000)) else None


def output_rule(spec, i: int) -> tuple | None:
    """How the fast path allocates output `i` when the caller passes none: (dtype source, per dim (input
    argument, its dim, af, bf, ae, be)) with out = (in - bf) / af * ae + be; None: the Python path does."""
    args = spec.arguments
    inputs = [j for j, a in enumerate(args) if a.kind == "tensor" and a.role != "out"]
    arg = args[i]
    if arg.dtype not in ("T", "float32") or arg.allocate:  # fp8 / integer outputs: no dtype code; laid out
        return None  # by the call's scalars: the spec's allocator (binding.py) runs in Python
    dtype_src = -1 if arg.dtype == "float32" else next((j for j in inputs if args[j].dtype == "T"), None)
    if dtype_src is None:
        return None
    dims = []
    for expr in arg.shape:
        names = dim_names(expr)
        out = _affine(expr, names[0]) if len(names) == 1 else None
        src = next(((j, k, *ab) for j in inputs for k, e in enumerate(args[j].shape)
                    if (ab := _affine(e, names[0]) if out else None)), None)
        if out is None or src is None:
            return None
        dims.append((*src, *out))
    return dtype_src, tuple(dims)


def fast_op(spec, launcher, like: dict[int, int | None], cuda: bool, original=None):
    """A FastOp for a PatchedOp whose launcher is a real kernel library (`harness.abi.Launcher`); None where
    the fast path is unavailable or the launcher is a Python stand-in. `original` serves the calls whose
    verdict is DEFERRED (ops.py), called with the caller's own arguments."""
    address = getattr(launcher, "address", None)
    module = load() if address and enabled() else None
    if module is None:
        return None
    import torch

    args = spec.arguments
    kinds = "".join("s" if a.kind == "scalar" else "o" if a.role == "out" else "t" for a in args)
    likes = tuple(-1 if like.get(i) is None else like[i] for i in range(len(args)))
    defaults = tuple(float(a.default) if a.kind == "scalar" and a.default is not None else None for a in args)
    rules = tuple(output_rule(spec, i) if a.role == "out" and like.get(i) is None else None
                  for i, a in enumerate(args))
    return module.FastOp(address, kinds, likes, defaults, rules, torch._C._cuda_getCurrentRawStream if cuda else None,
                         original)
