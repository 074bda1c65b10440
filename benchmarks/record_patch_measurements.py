"""Record the rows of a `bench` run (e.g. benchmarks/gpu/run_all.sh's OUT/kernels.jsonl) in each shipped patch's
manifest (patches/<op>/manifest.json).

Usage: python3 benchmarks/record_patch_measurements.py KERNELS_JSONL GPU_NAME DATE [SOURCE]
Only rows of `patches/<op>` candidates timed against SGLang's own op (py: baselines) are recorded. SOURCE (e.g.
"H200, 2026-12-01, commit abc1234, `bash benchmarks/gpu/run_all.sh OUT`") replaces what the provenance notes
say about the run behind `measured`, up to the next ";".
"""
import json
import re
import sys
from pathlib import Path

from astra_sglang.patchset.manifest import MeasuredShape, PatchManifest

rows_path, gpu, date = sys.argv[1], sys.argv[2], sys.argv[3]
source = sys.argv[4] if len(sys.argv) > 4 else ""
measured: dict[str, list[MeasuredShape]] = {}
baselines: dict[str, str] = {}
for line in Path(rows_path).read_text().splitlines():
    row = json.loads(line)
    if row.get("type") != "shape" or not row.get("speedup") or not row.get("candidate_label", "").startswith("patches/") \
            or not str(row.get("baseline_label", "")).startswith("py:"):
        continue
    op = row["kernel"]
    baselines[op] = row["baseline_label"]
    measured.setdefault(op, []).append(MeasuredShape(
        shape=tuple(row["shape"]), dtype=row["dtype"], candidate_us=row["candidate"]["median_us"],
        baseline_us=row["baseline"]["median_us"], speedup=row["speedup"], pct_roofline=row.get("pct_roofline")))
for op, shapes in measured.items():
    folder = Path("patches") / op
    # Keep what the patch says about itself (kernel file, defines, targets, who wrote it): only the
    # measurements, what they are relative to, and where they were taken change.
    manifest = PatchManifest.load(folder)
    manifest.measured, manifest.baseline = shapes, baselines[op]
    manifest.provenance.date, manifest.provenance.gpu = date, gpu
    if source:
        notes = manifest.provenance.notes
        clause = f"`measured`: {source}"
        notes, found = re.subn(r"`measured`: [^;]*", lambda m: clause, notes)
        manifest.provenance.notes = notes if found else f"{notes}; {clause}".lstrip("; ")
    manifest.save(folder)
    print(op, len(shapes), "shapes recorded")
