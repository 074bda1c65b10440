#!/usr/bin/env bash
# One GPU call for the harness issue: GPU test suite, evaluation cost (cold / cached build), and
# `astra-sglang bench` for every op. Usage (repo root, GPU machine): bash benchmarks/gpu/harness.sh OUTDIR
set -u
OUTDIR=${1:-/tmp/astra-out}; mkdir -p "$OUTDIR"
source benchmarks/gpu/setup.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUTDIR/gpu.txt"
python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_harness_gpu.py 2>&1 | tee "$OUTDIR/pytest-gpu.txt" | tail -30
# Evaluation cost: one candidate, one shape, bf16: cold (empty build cache) and cached.
export ASTRA_SGLANG_CACHE=/tmp/astra-cost-cache; rm -rf $ASTRA_SGLANG_CACHE
for run in cold cached; do
  /usr/bin/time -f "$run wall %e s" astra-sglang bench silu_and_mul --shapes 64x14336 --dtypes bf16 \
    --candidate tests/fixtures/honest/silu_and_mul_vec.cu --out "$OUTDIR/cost.jsonl" 2>&1 | tail -2
done | tee "$OUTDIR/cost.txt"
export ASTRA_SGLANG_CACHE=/tmp/astra-cache
for op in silu_and_mul fused_add_rmsnorm rmsnorm merge_attn_states_lse merge_state; do
  COLUMNS=200 astra-sglang bench $op --shapes quick+paper --dtypes bf16,fp16 --out "$OUTDIR/bench-$op.jsonl" \
    2>&1 | tee "$OUTDIR/bench-$op.txt" | tail -40
done
