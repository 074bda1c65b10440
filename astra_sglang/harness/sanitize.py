"""compute-sanitizer over a kernel before it is written to patches/: memcheck and racecheck, one launch per
(shape, dtype), each followed by a synchronization so that a finding is reported against that launch.

Run as `compute-sanitizer --tool T python -m astra_sglang.harness.sanitize REQUEST.json`; tensors are
allocated without guard regions here, so an access past a tensor lands outside any allocation the
sanitizer knows of. A finding rejects the kernel; a machine without compute-sanitizer (or without a GPU)
reports that it could not check, which the caller records as such.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from pydantic import BaseModel

TOOLS = ("memcheck", "racecheck")
MAX_ELEMENTS = 1 << 22
"""Every access is instrumented (memcheck runs ~100x slower, racecheck more): launches stay this small."""
TIMEOUT_S = 600


class SanitizeRequest(BaseModel):
    kernel: str
    source: str
    defines: dict[str, str] = {}
    shapes: list[tuple[int, ...]]
    dtypes: list[str]


class SanitizerReport(BaseModel):
    tool: str
    ran: bool
    """False: compute-sanitizer or a GPU is missing here; nothing was checked."""
    ok: bool = False
    findings: int = 0
    launches: int = 0
    detail: str = ""
    """The first lines of the sanitizer's report, or why it could not run."""


def executable() -> str | None:
    return shutil.which("compute-sanitizer") or shutil.which("/usr/local/cuda/bin/compute-sanitizer")


def small_shapes(spec, shapes: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """The shapes of `shapes` the sanitizer can afford, every odd one kept (they are where bounds break)."""
    import math

    return [s for s in dict.fromkeys(tuple(s) for s in shapes)
            if spec.supports(s) and max(math.prod(spec.arg_shape(a, s)) for a in spec.tensor_args) <= MAX_ELEMENTS]


_SUMMARY = {"memcheck": re.compile(r"ERROR SUMMARY: (\d+) error"),
            "racecheck": re.compile(r"RACECHECK SUMMARY: (\d+) hazard")}


def parse(tool: str, output: str, returncode: int) -> SanitizerReport:
    launched = re.search(r"^astra-sanitize: (\d+) launches", output, re.M)
    summary = _SUMMARY[tool].search(output)
    findings = int(summary.group(1)) if summary else 0
    lines = [ln for ln in output.splitlines() if ln.startswith("========") and "SUMMARY" not in ln]
    ok = summary is not None and findings == 0 and returncode == 0 and launched is not None
    detail = "\n".join(lines[:12]) if not ok else ""
    if not summary:
        detail = "no sanitizer summary (it did not finish): " + (output.strip().splitlines() or ["no output"])[-1]
    elif returncode != 0 and not findings:
        detail = f"the driven program exited with code {returncode}: " + (output.strip().splitlines() or [""])[-1]
    return SanitizerReport(tool=tool, ran=True, ok=ok, findings=findings,
                           launches=int(launched.group(1)) if launched else 0, detail=detail[:2000])


def sanitize(req: SanitizeRequest, tools: tuple[str, ...] = TOOLS) -> list[SanitizerReport]:
    """One report per tool; `ran` is False where the machine cannot run it."""
    exe = executable()
    if exe is None:
        return [SanitizerReport(tool=t, ran=False, detail="compute-sanitizer not found") for t in tools]
    reports = []
    # The driven program runs in a scratch folder: a source named relative to the caller's folder must not move.
    req = req.model_copy(update={"source": str(Path(req.source).resolve())})
    with tempfile.TemporaryDirectory(prefix="astra-sanitize-") as tmp:
        path = Path(tmp) / "request.json"
        path.write_text(req.model_dump_json())
        for tool in tools:
            cmd = [exe, "--tool", tool, "--error-exitcode", "9", "--print-limit", "20",
                   sys.executable, "-m", "astra_sglang.harness.sanitize", str(path)]
            # One cudaMalloc per tensor: an access past a tensor is then past an allocation the sanitizer
            # knows the size of, not inside a block of torch's caching allocator.
            env = {**os.environ, "PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, cwd=tmp, env=env)
            except subprocess.TimeoutExpired:
                reports.append(SanitizerReport(tool=tool, ran=True, detail=f"timed out after {TIMEOUT_S}s"))
                continue
            text = proc.stdout + proc.stderr
            if "no CUDA GPU" in text:
                reports.append(SanitizerReport(tool=tool, ran=False, detail="no CUDA GPU"))
                continue
            reports.append(parse(tool, text, proc.returncode))
    return reports


def _drive(request_path: str) -> int:
    import torch

    from astra_sglang.harness.abi import KernelLibrary, Launcher
    from astra_sglang.harness.build import build_library
    from astra_sglang.harness.inputs import allocate, fill
    from astra_sglang.specs.registry import get_spec

    if not torch.cuda.is_available():
        print("astra-sanitize: no CUDA GPU")
        return 3
    req = SanitizeRequest.model_validate_json(Path(request_path).read_text())
    spec = get_spec(req.kernel)
    build = build_library(req.source, req.defines)
    if not build.ok:
        print("astra-sanitize: build failed")
        return 4
    launcher = Launcher(KernelLibrary(build.library), len(spec.tensor_args), len(spec.scalar_args))
    gen = torch.Generator("cuda").manual_seed(0)
    launches = 0
    for dtype in req.dtypes:
        for shape in req.shapes:
            args = fill(spec, allocate(spec, tuple(shape), dtype, "cuda", guard=False), gen)
            code = launcher(args.tensors, args.scalars)
            torch.cuda.synchronize()
            if code not in (0, -1):
                print(f"astra-sanitize: launch failed at {tuple(shape)} {dtype}: cudaError {code}")
                return 5
            launches += code == 0
    print(f"astra-sanitize: {launches} launches")
    return 0


if __name__ == "__main__":
    sys.exit(_drive(sys.argv[1]))
