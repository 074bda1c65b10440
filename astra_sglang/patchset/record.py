"""A bench run's figures into patch manifests: `measured` (the shipped patch's rows timed against SGLang's own
op), what they are relative to, where and when they were taken, and the largest call every check passed.

The rows are `astra-sglang bench` JSONL (harness/report.py writes them): one object per shape and dtype, with
`candidate_label` "patches/<op>" for a shipped patch and a "py:" `baseline_label` for SGLang's own op. Only the
measurements, their baseline and their provenance change: what the patch says about itself (kernel file,
defines, targets, who wrote it) is kept.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Iterable

from astra_sglang.patchset.manifest import MeasuredShape, PatchManifest
from astra_sglang.specs.registry import get_spec

MEASURED_CLAUSE = re.compile(r"`measured`: [^;]*")
"""The part of a manifest's provenance notes that says which run `measured` comes from, up to the next ";"."""


def read_rows(paths: Iterable[Path]) -> list[dict]:
    """The per-shape rows of bench JSONL files (summary lines left out)."""
    found = []
    for path in paths:
        found += [r for r in map(json.loads, Path(path).read_text().splitlines()) if r.get("type", "shape") == "shape"]
    return found


def timed_against_sglang(row: dict) -> bool:
    """A shipped patch's row timed against SGLang's own op: the rows a manifest's `measured` holds."""
    return bool(row.get("speedup")) and str(row.get("candidate_label", "")).startswith("patches/") \
        and str(row.get("baseline_label", "")).startswith("py:")


def record(manifest: PatchManifest, rows: list[dict], gpu: str, date: str, source: str = "") -> PatchManifest:
    """A copy of `manifest` with `rows`' timings against SGLang's op as `measured` (unchanged where there are
    none). `source` (e.g. "H200, 2026-12-01, commit abc1234, `bash benchmarks/gpu/run_all.sh OUT`") replaces
    what the provenance notes say about the run behind `measured`, or is added to them."""
    manifest = manifest.model_copy(deep=True)
    mine = [r for r in rows if r.get("kernel", manifest.op) == manifest.op and timed_against_sglang(r)]
    if not mine:
        return manifest
    manifest.measured = [MeasuredShape(shape=tuple(r["shape"]), dtype=r["dtype"], speedup=r["speedup"],
                                       candidate_us=r["candidate"]["median_us"], baseline_us=r["baseline"]["median_us"],
                                       pct_roofline=r.get("pct_roofline")) for r in mine]
    manifest.baseline = mine[0]["baseline_label"]
    manifest.provenance.date, manifest.provenance.gpu = date, gpu
    if source:
        clause = f"`measured`: {source}"
        notes, found = MEASURED_CLAUSE.subn(lambda m: clause, manifest.provenance.notes)
        manifest.provenance.notes = notes if found else f"{notes}; {clause}".lstrip("; ")
    return manifest


def gate_max_bytes(op: str, rows: list[dict]) -> int | None:
    """The largest call (bytes of its tensors) that every check and timed run of `op` passed; None where any
    failed or none passed."""
    spec = get_spec(op)
    covered = [r for r in rows if r.get("kernel", op) == op and r.get("covered", True) and r.get("correct") is not None]
    if not covered or any(r["correct"] is False for r in covered):
        return None
    return max(spec.call_bytes(tuple(r["shape"]), r["dtype"]) for r in covered)
