"""A libclang setup for CUDA that needs only registry packages and the local CUDA toolkit.

PyPI's libclang 18 ships libclang.so without clang's resource headers, and its default resource dir is a
relative path, so `-x cuda` cannot find `__clang_cuda_runtime_wrapper.h`: we always pass -resource-dir,
pointing at clang 18's builtin headers from the ziglang 0.13 wheel (same clang major). Clang 18 knows CUDA
up to 12.3, so newer toolkits need -Wno-unknown-cuda-version, a few stub headers, and the nvcc version
macros that clang leaves undefined (else `#if __CUDACC_VER_MAJOR__` silently takes the wrong branch).
"""
from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

from astra_sglang.errors import AstraError
from astra_sglang.extraction.records import ClangEnv, SourceRoot
from astra_sglang.paths import cache_dir

GPU_ARCH = "sm_90"
# Headers the clang CUDA wrapper or CUDA's own headers include that CUDA 13 removed or some toolkits lack.
ALWAYS_STUBS = ("texture_fetch_functions.h", "curand_mtgp32_kernel.h")


@functools.cache
def resource_dir() -> Path:
    """Clang 18's resource dir (its `include/` holds the CUDA wrapper headers); override ASTRA_SGLANG_CLANG_RESOURCE_DIR."""
    override = os.environ.get("ASTRA_SGLANG_CLANG_RESOURCE_DIR")
    candidates = [Path(override)] if override else []
    try:
        import ziglang  # the wheel is only a carrier of clang 18's lib/include

        candidates.append(Path(ziglang.__file__).parent / "lib")
    except ImportError:
        pass
    for cand in candidates:
        if (cand / "include" / "__clang_cuda_runtime_wrapper.h").is_file():
            return cand
    raise AstraError("clang resource headers not found: pip install ziglang==0.13.0 "
                     "(or set ASTRA_SGLANG_CLANG_RESOURCE_DIR to a clang 18 resource dir)")


@functools.cache
def cuda_home() -> Path:
    """CUDA_HOME / CUDA_PATH, else the toolkit of the `nvcc` on PATH (which may be a wrapper script)."""
    looked = []
    for env in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(env):
            looked.append(Path(os.environ[env]))
    nvcc = shutil.which("nvcc")
    if nvcc:
        looked.append(Path(os.path.realpath(nvcc)).parent.parent)
        try:  # nvcc's dry run names its real install (TOP=...), whatever wraps it
            out = subprocess.run([nvcc, "--dryrun", "--version"], capture_output=True, text=True, timeout=30)
            for m in re.finditer(r"TOP=(\S+)", out.stdout + out.stderr):
                looked.append(Path(m.group(1).strip('"')).resolve())
        except (OSError, subprocess.SubprocessError):
            pass
    looked.append(Path("/usr/local/cuda"))
    for cand in looked:
        if (cand / "include" / "cuda_runtime.h").is_file():
            return cand
    raise AstraError(f"CUDA toolkit not found (looked in {', '.join(map(str, looked))}): set CUDA_HOME or put nvcc on PATH")


def cuda_version(home: Path) -> tuple[int, int]:
    text = (home / "include" / "cuda.h").read_text(errors="replace")
    m = re.search(r"#define\s+CUDA_VERSION\s+(\d+)", text)
    if not m:
        raise AstraError(f"cannot read CUDA_VERSION from {home / 'include' / 'cuda.h'}")
    value = int(m.group(1))
    return value // 1000, (value % 1000) // 10


def stub_dir(names: tuple[str, ...]) -> Path:
    """A folder of empty headers, searched first: each one named here hides the real (or missing) header."""
    folder = cache_dir() / "clang-stubs" / hashlib.sha256("\n".join(names).encode()).hexdigest()[:12]
    for name in names:
        path = folder / name
        if not path.is_file():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(_stub_text(name))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _stub_text(name: str) -> str:
    # torch headers are stubbed for sgl-kernel sources: its kernels still need the CUDA types that
    # ATen used to bring in (half, __nv_bfloat16), so those stubs pull in the CUDA headers.
    if name.startswith(("ATen/", "c10/", "torch/")) or name.endswith("pytorch_extension_utils.h"):
        return ("// astra-sglang parse stub for a torch header\n#pragma once\n#include <cuda_runtime.h>\n"
                "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n#include <cmath>\n#include <limits>\n")
    return "// astra-sglang parse stub: header unused by extracted kernels\n#pragma once\n"


def make_env(source: SourceRoot, extra_stubs: tuple[str, ...] = ()) -> ClangEnv:
    """The full libclang argument list for parsing one file of `source`."""
    home = cuda_home()
    major, minor = cuda_version(home)
    stubs = tuple(sorted(set(ALWAYS_STUBS) | set(source.stub_headers) | set(extra_stubs)))
    stubs_path = stub_dir(stubs)
    parse_only = (f"-D__CUDACC_VER_MAJOR__={major}", f"-D__CUDACC_VER_MINOR__={minor}")
    args = [
        "-x", "cuda", f"--cuda-gpu-arch={GPU_ARCH}", "-nocudalib", f"--cuda-path={home}",
        f"-std={source.std}", f"-resource-dir={resource_dir()}", "-Wno-unknown-cuda-version",
        "-ferror-limit=0", "-isystem", str(stubs_path),
    ]
    cccl = home / "include" / "cccl"
    if cccl.is_dir():  # CUDA 13 moved cub / thrust / cuda::std here; nvcc adds it implicitly
        args += ["-isystem", str(cccl)]
    args += [*parse_only, *source.defines]
    for inc in source.include_dirs:
        args.append(f"-I{inc}")
    return ClangEnv(resource_dir=resource_dir(), cuda_home=home, cuda_version=(major, minor),
                    stub_dir=stubs_path, args=tuple(args), parse_only_defines=parse_only)
