"""nvcc straight to a shared library exposing the C ABI; cached by source hash + flags + arch + nvcc version.

The source hashed and compiled is the candidate's text with its local quoted includes inlined (includes.py):
the build runs on a copy in a scratch folder, where nothing beside the original is found.

No torch headers: torch's extension flags (__CUDA_NO_HALF_OPERATORS__...) break ordinary half/bf16 code
and a torch-header build took 28 s for a tiny kernel (DESIGN.md). The same .so serves harness and patch.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Iterable

from astra_sglang.errors import AstraError
from astra_sglang.harness import includes, linemap
from astra_sglang.harness.records import BuildInfo
from astra_sglang.paths import cache_dir, templates_dir

BASE_FLAGS = ["-std=c++20", "-O3", "-shared", "-Xcompiler", "-fPIC", "-lineinfo", "-Xptxas", "-v",
              "--expt-relaxed-constexpr"]
NVCC_TIMEOUT_S = 300


def nvcc_path() -> str:
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    candidate = shutil.which("nvcc") or (home and shutil.which(os.path.join(home, "bin", "nvcc")))
    if not candidate:
        raise AstraError("nvcc not found: install the CUDA toolkit or set CUDA_HOME")
    return candidate


@functools.cache
def nvcc_version() -> str:
    out = subprocess.run([nvcc_path(), "--version"], capture_output=True, text=True, check=False).stdout
    return out.strip().splitlines()[-1] if out.strip() else "unknown"


def default_arch() -> str:
    """The current GPU's arch; sm_90 (Hopper, the lent GPUs) where there is none (compile-only)."""
    try:
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            return f"sm_{major}{minor}"
    except Exception:  # noqa: BLE001 - no usable torch/CUDA: compile for the default
        pass
    return "sm_90"


MACRO_NAME = re.compile(r"^[A-Za-z_]\w*$")


def parse_defines(items: Iterable[str], option: str = "-D") -> dict[str, str]:
    """`NAME=VALUE` items (a command line's -D) as a dict; AstraError naming the first that is not one: no value
    (a knob left at an implicit 1 fails far inside a header), or a name that is no C macro name."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        name, value = name.strip(), value.strip()
        if not MACRO_NAME.match(name):
            raise AstraError(f"{option} {item}: {name!r} is not a macro name (letters, digits and _, not starting "
                             "with a digit); write NAME=VALUE, e.g. -D THREADS=256")
        if not sep or not value:
            raise AstraError(f"{option} {item}: give {name} a value, NAME=VALUE (e.g. {option} {name}=256)")
        out[name] = value
    return out


def nvcc_command(source: Path, output: Path, defines: dict[str, str], arch: str) -> list[str]:
    number = arch.removeprefix("sm_")
    return [nvcc_path(), *BASE_FLAGS, f"-gencode=arch=compute_{number},code=sm_{number}",
            f"-I{templates_dir()}", *(f"-D{k}={v}" for k, v in sorted(defines.items())),
            "-o", str(output), str(source)]


HEADERS = ("astra_abi.h", "astra_device.cuh")
"""The project's headers a kernel may include (harness_templates/): part of every build's cache key."""


def _cache_key(text: str, defines: dict[str, str], arch: str) -> str:
    headers = [(templates_dir() / h).read_text() for h in HEADERS]
    blob = json.dumps([text, headers, sorted(defines.items()), arch, BASE_FLAGS, nvcc_version()])
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def parse_ptxas(log: str) -> tuple[int | None, int | None]:
    """Max registers and max spill bytes (stores + loads) over the kernels in a `-Xptxas -v` log."""
    regs = [int(m) for m in re.findall(r"Used (\d+) registers", log)]
    spills = [int(a) + int(b) for a, b in re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)]
    return (max(regs) if regs else None), (max(spills) if spills else None)


def build_library(source: str | Path, defines: dict[str, str] | None = None, arch: str | None = None) -> BuildInfo:
    """Compile `source` to a cached .so. A failing build returns ok=False with the compiler's log."""
    source = Path(source)
    if not source.is_file():
        raise AstraError(f"kernel source not found: {source}")
    defines = dict(defines or {})
    arch = arch or default_arch()
    text = includes.expand(source)
    folder = cache_dir() / "build" / _cache_key(text, defines, arch)
    library, log_path = folder / "kernel.so", folder / "build.log"
    if library.is_file():
        regs, spills = parse_ptxas(log_path.read_text() if log_path.is_file() else "")
        return BuildInfo(ok=True, cached=True, library=str(library), registers=regs, spill_bytes=spills)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="astra-build-") as tmp:
        # Build a copy in a scratch dir: the source may be untrusted and nvcc writes next to its inputs.
        src = Path(tmp) / "kernel.cu"
        src.write_text(text)
        out = Path(tmp) / "kernel.so"
        try:
            proc = subprocess.run(nvcc_command(src, out, defines, arch), capture_output=True, text=True,
                                  timeout=NVCC_TIMEOUT_S, cwd=tmp)
        except subprocess.TimeoutExpired:
            return BuildInfo(ok=False, seconds=time.perf_counter() - start, log=f"nvcc timed out after {NVCC_TIMEOUT_S}s")
        log = (proc.stdout + proc.stderr).replace(tmp + "/", "")
        seconds = time.perf_counter() - start
        if proc.returncode != 0 or not out.is_file():
            # An extracted kernel.cu: name the original files behind the errors (its provenance line map).
            return BuildInfo(ok=False, seconds=seconds, log=linemap.header(log, source) + log[-4000:])
        folder.mkdir(parents=True, exist_ok=True)
        log_path.write_text(log)
        staged = folder / f"kernel.so.{os.getpid()}"
        shutil.copyfile(out, staged)
        os.replace(staged, library)  # atomic: concurrent builders of the same key both end with a whole file
    regs, spills = parse_ptxas(log)
    return BuildInfo(ok=True, seconds=seconds, library=str(library), registers=regs, spill_bytes=spills, log=log[-4000:])
