"""Record the rows of a `bench` run (e.g. benchmarks/gpu/run_all.sh's OUT/kernels.jsonl) in each shipped patch's
manifest (patches/<op>/manifest.json), as `astra-sglang patch record` does.

Usage: python3 benchmarks/record_patch_measurements.py KERNELS_JSONL GPU_NAME DATE [SOURCE]
Only rows of `patches/<op>` candidates timed against SGLang's own op (py: baselines) are recorded. SOURCE (e.g.
"H200, 2026-12-01, commit abc1234, `bash benchmarks/gpu/run_all.sh OUT`") replaces what the provenance notes
say about the run behind `measured`, up to the next ";".
"""
import sys

from astra_sglang.cli import main

rows, gpu, date = sys.argv[1:4]
source = ["--source", sys.argv[4]] if len(sys.argv) > 4 else []
main(["patch", "record", rows, "--gpu", gpu, "--date", date, "--patches", "patches", *source])
