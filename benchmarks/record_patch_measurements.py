"""Write each shipped patch's manifest (patches/<op>/manifest.json) with the numbers of a kernels.sh run.

Usage: python3 benchmarks/record_patch_measurements.py KERNELS_JSONL GPU_NAME DATE
Only rows of `patches/<op>` candidates timed against SGLang's own op (py: baselines) are recorded.
"""
import json
import sys
from pathlib import Path

from astra_sglang.patching.manifest import MeasuredShape, PatchManifest, Provenance
from astra_sglang.specs.registry import get_spec

rows_path, gpu, date = sys.argv[1], sys.argv[2], sys.argv[3]
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
    spec = get_spec(op)
    manifest = PatchManifest(
        op=op, dtypes=spec.dtypes, sglang_versions=">=0.5.17",
        targets=[f"{t.module}:{t.attr}" for t in spec.sglang_targets],
        provenance=Provenance(method="hand", date=date, gpu=gpu, started_from="astra_sglang/kernels/" + op + ".cu",
                              notes="written by hand with tuner knobs; versions and measurements in "
                                    "benchmarks/notes/kernels.md"),
        baseline="SGLang 0.5.17 " + baselines[op], measured=shapes)
    manifest.save(Path("patches") / op)
    print(op, len(shapes), "shapes recorded")
