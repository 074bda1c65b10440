"""Where an onboarded op's original CUDA lives, found without importing anything, and its first extraction.

flashinfer's wheel ships its headers: a Python function `rmsnorm` of `flashinfer.norm` is launched by a torch-free
host function named like it (`flashinfer::norm::RMSNorm`, in data/include/flashinfer/norm.cuh) around a kernel
`RMSNormKernel`. Where both are found, `onboard` writes `[sources.flashinfer]` and extracts the original through
the generic launcher (extraction/launcher.py): that extraction is the op's first kernel (`bench`, the tuner's
start). Where the launcher cannot be derived (a host function taking what the spec does not name), the sources
are left out and the op itself stays the first kernel.
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path

from astra_sglang.errors import AstraError
from astra_sglang.paths import extract_dir

INCLUDE = Path("data") / "include" / "flashinfer"


def _norm(name: str) -> str:
    return name.replace("_", "").lower()


def flashinfer_source(module: str, attr: str, root: Path | None = None) -> dict[str, dict[str, str]]:
    """`{"flashinfer": {path, kernel, host_entry}}` for a function of flashinfer whose header host function and
    kernel are named after it (a trailing plural s aside); {} where none is found or flashinfer is not here."""
    if module.split(".")[0] != "flashinfer":
        return {}
    if root is None:
        from astra_sglang.extraction.sources import _package_dir

        root = _package_dir("flashinfer")
    folder = root / INCLUDE if root else None
    if folder is None or not folder.is_dir():
        return {}
    want = _norm(attr)
    for header in sorted(folder.rglob("*.cuh")):
        text = header.read_text(errors="replace")
        for match in re.finditer(r"\bcudaError_t\s+([A-Z]\w*)\s*\(", text):
            name = match.group(1)
            if _norm(name) not in (want, want.removesuffix("s")):
                continue
            if not re.search(rf"__global__\s+void\s+{name}Kernel\b", text):
                continue
            space = header.stem if re.search(rf"\bnamespace\s+{header.stem}\b", text) else ""
            return {"flashinfer": {"path": str(header.relative_to(root)), "kernel": f"{name}Kernel",
                                   "host_entry": "::".join(["flashinfer", *([space] if space else []), name])}}
    return {}


def extract_first(name: str, kind: str) -> tuple[Path | None, str]:
    """Extract the op's original from `kind` into extract's default folder: (kernel.cu, what happened), or
    (None, why not) where libclang or the launcher fails."""
    try:
        from astra_sglang.extraction.pipeline import extract
    except ImportError as exc:  # libclang not installed
        return None, f"extraction needs libclang ({exc})"
    try:
        done = extract(name, kind, extract_dir(name, kind), check=shutil.which("nvcc") is not None)
    except AstraError as exc:
        return None, str(exc)
    return done.kernel_cu, f"extracted from {kind} {done.version}: {done.units} units, {done.lines} lines"
