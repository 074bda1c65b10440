"""Nsight Compute for the agent loop: several shapes of one candidate in one ncu process, more sections than
the harness's profiler asks for, and the source page's hotspots (which SASS instructions, and where the
build's -lineinfo maps them, which source lines the warps stall on).

One ncu run exports a report (`-o`) with the sections below and `--import-source yes`; two imports of it
need no GPU: `--page details --csv` (every metric, attributed to shapes by the NVTX range of harness/ncu.py)
and `--page source --csv --print-source sass` (one row per SASS instruction with its warp-stall samples).
Where the export path gives nothing (an older ncu), the harness's live details path is used instead. The raw
outputs are kept in `keep_dir` when given, so what the agents were told can be checked against ncu's own words.
"""
from __future__ import annotations

import csv
import io
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from pydantic import BaseModel, Field

from astra_sglang.harness.ncu import (PER_SHAPE_S, SECTIONS, STALL_METRICS, TIMEOUT_S, DriveReport, NcuProfiler,
                                      ProfileFacts, ProfileRequest, report_path)
from astra_sglang.harness.ncu_csv import NVTX_RANGE, attribute, parse_ncu_launches

MORE_SECTIONS = ("ComputeWorkloadAnalysis", "SchedulerStats", "InstructionStats", "SourceCounters",
                 "MemoryWorkloadAnalysis_Tables")
HOTSPOTS = 6
SAMPLES = ("Warp Stall Sampling (All Samples)", "Warp Stall Sampling (All)", "# Samples", "Sampling Data (All)")
"""The source page's column of warp-state samples per instruction (its name has changed between versions)."""


class Hotspot(BaseModel):
    """One SASS instruction (or source line) where warps were sampled stalled."""

    where: str
    share: float
    """% of the kernel's stall samples."""
    reason: str = ""
    """The stall reason with the most samples there, where the page breaks them down."""


class CandidateProfile(BaseModel):
    """What ncu measured of one candidate: per shape (shape/dtype) the metrics, and the hotspots at the first."""

    shapes: dict[str, dict[str, float]] = Field(default_factory=dict)
    hotspots: list[Hotspot] = Field(default_factory=list)
    registers: int | None = None
    spill_bytes: int | None = None
    seconds: float = 0.0
    """GPU time ncu took (the profiling budget's measure)."""
    note: str = ""
    """Why something is missing (ncu's complaint), empty when all went well."""

    def facts(self) -> ProfileFacts:
        """The first shape's metrics as the harness's ProfileFacts (what bottleneck.from_ncu reads)."""
        first = next(iter(self.shapes.items()), None)
        ncu = {**first[1], f"profiled shape {first[0].replace('/', ' ')}": 1.0} if first and first[1] else {}
        return ProfileFacts(ncu=ncu, registers=self.registers, spill_bytes=self.spill_bytes)


def _number(text: str) -> float:
    try:
        return float((text or "0").replace(",", ""))
    except ValueError:
        return 0.0


def parse_source_page(text: str, limit: int = HOTSPOTS) -> list[Hotspot]:
    """`ncu --page source --csv` -> the instructions with the most stall samples, as shares of all samples."""
    rows = list(csv.reader(io.StringIO(text[text.find('"'):] if '"' in text else "")))
    head = next((i for i, r in enumerate(rows) if "Source" in r and any(c in r for c in SAMPLES)), None)
    if head is None:
        return []
    names = rows[head]
    where, samples = names.index("Source"), next(names.index(c) for c in SAMPLES if c in names)
    reasons = [i for i, c in enumerate(names) if c.startswith("stall_") or
               (c.startswith("smsp__pcsamp_warps_issue_stalled_") and not c.endswith("_not_issued"))]
    data = [r for r in rows[head + 1:] if len(r) == len(names) and r[where].strip()]
    total = sum(_number(r[samples]) for r in data)
    if total <= 0:
        return []
    top = sorted(data, key=lambda r: -_number(r[samples]))[:limit]
    out = []
    for r in top:
        if _number(r[samples]) <= 0:
            break
        worst = max(reasons, key=lambda i: _number(r[i]), default=None)
        reason = names[worst].removeprefix("smsp__pcsamp_warps_issue_stalled_") if worst is not None and \
            _number(r[worst]) > 0 else ""
        out.append(Hotspot(where=" ".join(r[where].split())[:160], share=100 * _number(r[samples]) / total,
                           reason=reason))
    return out


class DeepProfiler(NcuProfiler):
    """NcuProfiler with more sections, several shapes a run and the source page (see the module docstring).
    Picklable: it runs on a GPU worker through the pool's `exclusive`."""

    def __init__(self, kernel: str, ncu: str | None = None):
        super().__init__(kernel, ncu)

    def export_command(self, request: Path, report: Path) -> list[str]:
        sections = [arg for s in (*SECTIONS, *MORE_SECTIONS) for arg in ("--section", s)]
        return [self.ncu, "--export", str(report), "--force-overwrite", "--import-source", "yes", "--nvtx",
                "--nvtx-include", f"{NVTX_RANGE}/", "--clock-control", "none", "--target-processes", "all", *sections,
                "--metrics", ",".join(STALL_METRICS), sys.executable, "-m", "astra_sglang.harness.ncu", str(request)]

    def _import(self, report: Path, *page: str) -> str:
        try:
            proc = subprocess.run([self.ncu, "--import", str(report), "--csv", *page], capture_output=True, text=True,
                                  timeout=120)
        except subprocess.TimeoutExpired:
            return ""
        return proc.stdout if proc.returncode == 0 else ""

    def profile_entry(self, library: str, shapes: list[tuple[tuple[int, ...], str]],
                      keep_dir: str | None = None) -> CandidateProfile:
        """ncu facts of `library` at (shape, dtype) pairs of one dtype (the first pair's); hotspots at the first."""
        import time

        if not self.ncu or not shapes:
            return CandidateProfile(note="ncu is not installed" if not self.ncu else "no shape to profile")
        dtype = shapes[0][1]
        dims = [tuple(s) for s, d in shapes if d == dtype]
        keys = [f"{'x'.join(map(str, s))}/{dtype}" for s in dims]
        began = time.time()
        with tempfile.TemporaryDirectory(prefix="astra-ncu-") as tmp:
            request, report = Path(tmp) / "request.json", Path(tmp) / "report.ncu-rep"
            request.write_text(ProfileRequest(kernel=self.kernel, library=library, shapes=dims,
                                              dtype=dtype).model_dump_json())
            try:
                proc = subprocess.run(self.export_command(request, report), capture_output=True, text=True,
                                      timeout=TIMEOUT_S + PER_SHAPE_S * (len(dims) - 1), cwd=tmp)
            except subprocess.TimeoutExpired:
                return CandidateProfile(seconds=time.time() - began, note="ncu timed out")
            launched = report_path(request)
            codes = DriveReport.model_validate_json(launched.read_text()).codes if launched.exists() else None
            details = self._import(report, "--nvtx", "--page", "details") or self._import(report, "--page", "details")
            source = self._import(report, "--page", "source", "--print-source", "sass")
            if keep_dir:
                Path(keep_dir).mkdir(parents=True, exist_ok=True)
                for name, text in (("ncu-details.csv", details), ("ncu-source.csv", source),
                                   ("ncu-profile.log", proc.stdout[-20000:] + proc.stderr[-20000:])):
                    (Path(keep_dir) / name).write_text(text)
                if report.exists():
                    shutil.copyfile(report, Path(keep_dir) / "report.ncu-rep")
        per_shape, problem = attribute(parse_ncu_launches(details), len(dims), codes) if details else ([], "no report")
        if not any(per_shape):  # the export path gave nothing: the harness's live details path
            per_shape = self.profile_many(library, dims, dtype)
            problem = problem or ("" if any(per_shape) else "ncu gave no metrics")
        return CandidateProfile(shapes={k: m for k, m in zip(keys, per_shape) if m}, hotspots=parse_source_page(source),
                                seconds=time.time() - began, note=(problem or "")[:300])
