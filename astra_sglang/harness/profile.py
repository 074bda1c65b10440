"""Nsight Compute facts about one candidate at one shape, for the ProfilingAgent.

ncu runs `python -m astra_sglang.harness.profile` on a request file: the driver builds (cached) the
kernel library, makes one shape's arguments and launches once inside an NVTX range that ncu filters on,
so the tensor-filling kernels around it are not profiled. Sections, not raw metric names, are asked for:
their metric names change less between ncu versions. `--clock-control none` leaves the card's clocks
as they are. Where ncu is missing or fails, the profile is empty and the loop goes on without it.
"""
from __future__ import annotations

import csv
import io
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from pydantic import BaseModel

from astra_sglang.harness.records import EvalResult, ShapeResult

SECTIONS = ("SpeedOfLight", "Occupancy", "LaunchStats", "WarpStateStats", "MemoryWorkloadAnalysis")
NVTX_RANGE = "astra"
TIMEOUT_S = 180


class ProfileRequest(BaseModel):
    kernel: str
    library: str
    """A built kernel library, or "py:MODULE:FUNC" (SGLang's own op, profiled the same way)."""
    shape: tuple[int, ...]
    dtype: str


def parse_ncu_csv(text: str) -> dict[str, float]:
    """`ncu --csv --page details` rows -> {"Section: Metric (unit)": value}; the first kernel's values
    win, numbers only (ncu prints thousands separators)."""
    start = text.find('"ID"')
    if start < 0:
        return {}
    facts: dict[str, float] = {}
    for row in csv.DictReader(io.StringIO(text[start:])):
        name, value = row.get("Metric Name"), (row.get("Metric Value") or "").replace(",", "")
        if not name:
            continue
        unit = row.get("Metric Unit") or ""
        key = f"{row.get('Section Name', '')}: {name}" + (f" ({unit})" if unit else "")
        try:
            facts.setdefault(key, float(value))
        except ValueError:
            continue  # text-valued rows (e.g. a bottleneck name)
    return facts


def pick_shape(result: EvalResult) -> ShapeResult | None:
    """The timed shape furthest from the roofline: where the profile says most about the gap."""
    timed = [s for s in result.shapes if s.pct_roofline is not None]
    prefer = [s for s in timed if s.dtype == "bfloat16"] or timed
    return min(prefer, key=lambda s: s.pct_roofline) if prefer else None


class NcuProfiler:
    """The agent loop's Profiler: (candidate source, its EvalResult) -> ProfileFacts."""

    def __init__(self, kernel: str, ncu: str | None = None):
        self.kernel = kernel
        self.ncu = ncu or shutil.which("ncu") or (shutil.which("/usr/local/cuda/bin/ncu"))

    @classmethod
    def available(cls) -> bool:
        return bool(shutil.which("ncu") or shutil.which("/usr/local/cuda/bin/ncu"))

    def command(self, request_path: Path) -> list[str]:
        sections = [arg for s in SECTIONS for arg in ("--section", s)]
        return [self.ncu, "--csv", "--page", "details", "--nvtx", "--nvtx-include", f"{NVTX_RANGE}/",
                "--clock-control", "none", "--target-processes", "all", *sections,
                sys.executable, "-m", "astra_sglang.harness.profile", str(request_path)]

    def profile(self, library: str, shape: tuple[int, ...], dtype: str) -> dict[str, float]:
        """ncu section facts of one launch (L2 flushed first: ncu's default cache control); {} on failure."""
        if not self.ncu:
            return {}
        with tempfile.TemporaryDirectory(prefix="astra-ncu-") as tmp:
            request = Path(tmp) / "request.json"
            request.write_text(ProfileRequest(kernel=self.kernel, library=library, shape=shape,
                                              dtype=dtype).model_dump_json())
            try:
                proc = subprocess.run(self.command(request), capture_output=True, text=True, timeout=TIMEOUT_S,
                                      cwd=tmp)
            except subprocess.TimeoutExpired:
                return {}
        return parse_ncu_csv(proc.stdout)

    def __call__(self, source: str, result: EvalResult):
        from astra_sglang.agents.records import ProfileFacts

        facts = ProfileFacts(registers=result.build.registers if result.build else None,
                             spill_bytes=result.build.spill_bytes if result.build else None)
        shape = pick_shape(result)
        if not self.ncu or shape is None or not (result.build and result.build.library):
            return facts
        measured = self.profile(result.build.library, shape.shape, shape.dtype)
        if measured:
            measured["profiled shape " + "x".join(map(str, shape.shape)) + " " + shape.dtype] = 1.0
        return facts.model_copy(update={"ncu": measured})


def _drive(request_path: str) -> None:
    """Inside ncu: one launch of the candidate, inside the NVTX range ncu filters on."""
    import torch

    from astra_sglang.harness.abi import KernelLibrary, Launcher
    from astra_sglang.harness.inputs import allocate, fill
    from astra_sglang.specs.registry import get_spec

    req = ProfileRequest.model_validate_json(Path(request_path).read_text())
    spec = get_spec(req.kernel)
    args = fill(spec, allocate(spec, req.shape, req.dtype, "cuda"), torch.Generator("cuda").manual_seed(0))
    if req.library.startswith("py:"):
        from astra_sglang.harness.gpu_eval import python_op

        launcher = python_op(spec, req.library)
    else:
        launcher = Launcher(KernelLibrary(req.library), len(spec.tensor_args), len(spec.scalar_args))
    launcher(args.tensors, args.scalars)  # module load outside the range
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push(NVTX_RANGE)
    launcher(args.tensors, args.scalars)
    torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()


if __name__ == "__main__":
    _drive(sys.argv[1])
