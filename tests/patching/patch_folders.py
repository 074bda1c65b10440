"""A patch folder on disk for the patching tests (imported by this unique name: several test folders have a
conftest module, so `from conftest import ...` resolves to whichever was collected first)."""
from __future__ import annotations

import json
from pathlib import Path


def write_patch(root: Path, op: str = "silu_and_mul", targets=("astra_fake_layers:silu_and_mul",),
                enabled: bool = True) -> Path:
    folder = root / op
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "kernel.cu").write_text("// stand-in: the tests never build it\n")
    manifest = {"op": op, "dtypes": ["float32", "bfloat16"], "targets": list(targets), "enabled": enabled,
                "provenance": {"method": "hand", "notes": "test"},
                "measured": [{"shape": [16, 4096], "dtype": "bfloat16", "candidate_us": 2.0, "baseline_us": 3.0,
                              "speedup": 1.5}]}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder
