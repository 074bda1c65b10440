#!/usr/bin/env bash
# GPU call for the harness + extraction issues: the whole GPU test suite, the evaluation cost (cold and
# cached build), and our first kernels + extracted originals against SGLang's own ops (baselines.py).
# Usage (repo root, GPU machine; carry .stage and work/ with extracted kernels): bash benchmarks/gpu/call_a.sh OUTDIR
set -u
OUTDIR=${1:?OUTDIR}; mkdir -p "$OUTDIR"
source benchmarks/gpu/setup.sh > "$OUTDIR/env.txt"; cat "$OUTDIR/env.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$OUTDIR/env.txt"
python3 -m pytest -q -m gpu -p no:cacheprovider tests --ignore=tests/extraction 2>&1 | tail -30 > "$OUTDIR/pytest-gpu.txt"; tail -5 "$OUTDIR/pytest-gpu.txt"
export ASTRA_SGLANG_CACHE=/tmp/astra-cost-cache; rm -rf $ASTRA_SGLANG_CACHE
for run in cold cached; do
  /usr/bin/time -f "$run: wall %e s (build + check + time, one shape, bf16, isolated process)" astra-sglang bench silu_and_mul \
    --shapes 64x14336 --dtypes bf16 --candidate tests/fixtures/honest/silu_and_mul_vec.cu --out /tmp/cost.jsonl 2>&1 | tail -2
done | tee "$OUTDIR/cost.txt"
export ASTRA_SGLANG_CACHE=/tmp/astra-cache
python3 benchmarks/gpu/baselines.py "$OUTDIR" work/extract 2>&1 | grep -E "^## |geomean" 
