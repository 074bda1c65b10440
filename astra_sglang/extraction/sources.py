"""Locate a kernel source (installed or unpacked sglang / flashinfer package, SGLang git checkout) and its version.

Source kinds, as named by the `[sources.<kind>]` tables of a spec:
- sglang: the sglang package's JIT kernels (`kernels/jit/csrc`, headers in `kernels/jit/include`, tvm-ffi
  headers from the apache-tvm-ffi package); root = the `sglang` package folder.
- flashinfer: the headers the flashinfer-python wheel ships (`data/include`); root = the `flashinfer` folder.
- sgl-kernel: the AOT sources, only in a git checkout: `sgl-kernel/` (older) or `python/sglang/kernels/aot/`
  (newer); root = that folder, so spec paths read `csrc/...` in both layouts.
"""
from __future__ import annotations

import importlib.util
import re
import subprocess
from pathlib import Path

from astra_sglang.errors import AstraError
from astra_sglang.extraction.records import SourceRoot

KINDS = ("sglang", "flashinfer", "sgl-kernel")
PACKAGE_OF = {"sglang": "sglang", "flashinfer": "flashinfer"}
AOT_LAYOUTS = ("python/sglang/kernels/aot", "sgl-kernel")
# Torch-only headers of sgl-kernel's host code: parsed as stubs (its kernels use only CUDA types).
TORCH_STUBS = ("ATen/cuda/CUDAContext.h", "ATen/ATen.h", "c10/cuda/CUDAGuard.h", "c10/cuda/CUDAStream.h",
               "torch/all.h", "torch/extension.h", "torch/library.h", "pytorch_extension_utils.h")
# Flags the upstream builds use (read from sglang kernels/jit/utils/arch.py, flashinfer jit/core.py, sgl-kernel
# CMakeLists): recorded in provenance so a reader can tell what the extracted file was compiled like there.
UPSTREAM_FLAGS = {
    "sglang": ("-std=c++20", "-O3", "--expt-relaxed-constexpr", "-DSGL_CUDA_ARCH=900", "-gencode=arch=compute_90a,code=sm_90a"),
    "flashinfer": ("-std=c++17", "-O3", "-DNDEBUG", "-use_fast_math", "--expt-relaxed-constexpr", "-DFLASHINFER_ENABLE_F16",
                   "-DFLASHINFER_ENABLE_BF16", "-DFLASHINFER_ENABLE_FP8_E4M3", "-DFLASHINFER_ENABLE_FP8_E5M2"),
    "sgl-kernel": ("-std=c++17", "-O3", "-DNDEBUG", "--use_fast_math", "--expt-relaxed-constexpr", "-DFLASHINFER_ENABLE_F16",
                   "-DFLASHINFER_ENABLE_BF16", "-gencode=arch=compute_90a,code=sm_90a"),
}


def _package_dir(name: str) -> Path | None:
    """An installed package's folder, found without importing it (flashinfer asserts CUDA on import)."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def sglang_package_dir() -> Path:
    """The installed sglang package's folder, found without importing it (importing it pulls the server in)."""
    root = _package_dir("sglang")
    if root is None:
        raise AstraError("sglang is not installed here: its fused MoE config files and lookup are part of it")
    return root


def _version(pkg_dir: Path, dist: str) -> str:
    """Version from the dist-info next to the package, else the package's own version file."""
    for meta in sorted(pkg_dir.parent.glob("*.dist-info/METADATA")):
        head = meta.read_text(errors="replace")[:2000]
        name = re.search(r"^Name:\s*(\S+)", head, re.M)
        version = re.search(r"^Version:\s*(\S+)", head, re.M)
        if name and version and re.sub(r"[-_.]+", "-", name.group(1).lower()) == dist:
            return version.group(1)
    for fname in ("_version.py", "_build_meta.py", "version.py"):
        path = pkg_dir / fname
        if path.is_file():
            m = re.search(r"""__version__\s*(?::\s*str\s*)?=\s*(?:version\s*=\s*)?['"]([^'"]+)['"]""", path.read_text())
            if m:
                return m.group(1)
    return ""


def _git_commit(path: Path) -> str:
    try:
        out = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def _tvm_ffi_include(pkg_dir: Path) -> Path | None:
    """tvm-ffi headers: next to sglang (an unpacked wheel set) or the installed apache-tvm-ffi package."""
    for cand in (pkg_dir.parent / "tvm_ffi", _package_dir("tvm_ffi")):
        if cand is not None and (cand / "include" / "tvm" / "ffi").is_dir():
            return cand / "include"
    return None


def make_root(kind: str, root: Path, origin: str) -> SourceRoot:
    """A SourceRoot of `kind` at `root` with the include dirs, defines and version its own build uses."""
    root = root.resolve()
    if kind == "sglang":
        incs = [root / "kernels" / "jit" / "include"]
        tvm = _tvm_ffi_include(root)
        if tvm is None:
            raise AstraError(f"tvm-ffi headers not found next to {root} nor installed: pip install apache-tvm-ffi")
        incs.append(tvm)
        # SGL_CUDA_ARCH selects code paths (PDL, vector width); without it the PDL code silently disappears.
        return SourceRoot(kind, root, origin, _version(root, "sglang"), _git_commit(root), tuple(incs),
                          ("-DSGL_CUDA_ARCH=900",), "c++20", (), UPSTREAM_FLAGS[kind])
    if kind == "flashinfer":
        incs = [root / "data" / "include"]
        defines = ("-DFLASHINFER_ENABLE_F16", "-DFLASHINFER_ENABLE_BF16", "-DFLASHINFER_ENABLE_FP8_E4M3",
                   "-DFLASHINFER_ENABLE_FP8_E5M2")
        return SourceRoot(kind, root, origin, _version(root, "flashinfer-python"), _git_commit(root), tuple(incs),
                          defines, "c++17", ("cublasLt.h", "cublas_v2.h", "curand_kernel.h"), UPSTREAM_FLAGS[kind])
    if kind == "sgl-kernel":
        incs = [p for p in (root / "include", root / "csrc") if p.is_dir()]
        return SourceRoot(kind, root, origin, "", _git_commit(root), tuple(incs), (), "c++17", TORCH_STUBS,
                          UPSTREAM_FLAGS[kind])
    raise AstraError(f"unknown source kind {kind!r}; known: {', '.join(KINDS)}")


def kinds_at(path: Path) -> dict[str, Path]:
    """Every source kind a folder provides, with its root (a package dir, an unpacked wheel, a checkout)."""
    found: dict[str, Path] = {}
    for base in (path, path / "python"):  # a checkout keeps the sglang package under python/
        for kind, pkg in PACKAGE_OF.items():
            for cand in (base, base / pkg):
                if kind == "sglang" and (cand / "kernels" / "jit" / "csrc").is_dir():
                    found.setdefault(kind, cand)
                if kind == "flashinfer" and (cand / "data" / "include" / "flashinfer").is_dir():
                    found.setdefault(kind, cand)
    for layout in AOT_LAYOUTS:
        if (path / layout / "csrc").is_dir():
            found.setdefault("sgl-kernel", path / layout)
    if (path / "csrc").is_dir() and path.name in ("sgl-kernel", "aot"):
        found.setdefault("sgl-kernel", path)
    return found


def locate(kinds: list[str], source: str | None) -> SourceRoot:
    """The first of `kinds` (the spec's sources, in order) that `source` provides.

    `source` is None (an installed package), a kind name (that installed package) or a path.
    """
    looked: list[str] = []
    if source and source not in KINDS:
        path = Path(source).expanduser()
        if not path.exists():
            raise AstraError(f"source not found: {path} does not exist")
        found = kinds_at(path.resolve())
        for kind in kinds:
            if kind in found:
                return make_root(kind, found[kind], str(path))
        what = ", ".join(found) or "no sglang package, flashinfer package or sgl-kernel sources"
        raise AstraError(f"source not found: {path} holds {what}; this kernel needs one of: {', '.join(kinds)}")
    wanted = [source] if source else kinds
    if source and source not in kinds:
        raise AstraError(f"this kernel has no {source!r} source; it has: {', '.join(kinds)}")
    for kind in wanted:
        pkg = PACKAGE_OF.get(kind)
        if pkg is None:
            looked.append(f"{kind} (only in a git checkout: pass --from PATH)")
            continue
        pkg_dir = _package_dir(pkg)
        if pkg_dir is not None and kind in kinds_at(pkg_dir):
            return make_root(kind, pkg_dir, f"installed {pkg}")
        looked.append(f"installed package {pkg!r}" + (f" at {pkg_dir}" if pkg_dir else " (not installed)"))
    raise AstraError(f"source not found: looked for {'; '.join(looked)}")
