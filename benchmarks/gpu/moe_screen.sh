#!/usr/bin/env bash
# Fused MoE's screening tier on the GPU machine, one command of at most ~9 minutes (benchmarks/moe_screen_bench.py):
#   per shape (Qwen3-30B-A3B 128x768x2048 top-8, Mixtral 8x14336x4096 top-2, bf16) at batch 64:
#     cold    SGLang's whole tuning space on one GPU, Triton compiling ahead on the other CPU cores (empty cache)
#     warm1   the first WARM configs of the order on one GPU, kernels cached;  warm2  the same on two GPUs
#   then tiers: the screening tier and the isolated evaluator per batch size against SGLang's shipped pick
# Prints configs/s per GPU, the full-space wall, the two-GPU speedup, the compile-ahead hit rate, the two tiers.
# Usage (repo root, an nvidia-h100-x2 / h200-x2 machine, the SGLang runtime kit carried as .stage: see setup.sh):
#   bash benchmarks/gpu/moe_screen.sh [OUTDIR]
# env: DEADLINE (seconds for the bench's phases, 470), SHAPES (qwen3,mixtral), PHASES (cold,warm1,warm2,tiers),
#      BUCKETS (the tiers' batch sizes, 1,16,64,256,1024,4096), WARM (600), SCREEN_BUDGET (120), SIMULATE=1 (no GPU)
#      WORK (the Triton cache, /tmp/moe-screen-work: kept for a later call on the same machine)
# OUTDIR (default $OUT, else /tmp/moe-screen) gets env.txt, bench.log, moe_screen.jsonl, moe_screen.md, tune-*/.
# Triton compiles of SGLang's whole space take most of a cold phase (a few CPU seconds each, two GEMMs a config):
# where one call cannot hold every phase, the deadline cuts the last ones; run the rest in a second call, e.g.
#   SHAPES=mixtral bash benchmarks/gpu/moe_screen.sh OUT2      PHASES=tiers bash benchmarks/gpu/moe_screen.sh OUT3
set -u
OUTDIR=${1:-${OUT:-/tmp/moe-screen}}; mkdir -p "$OUTDIR"
source benchmarks/gpu/setup.sh > "$OUTDIR/env.txt" 2>&1
{ nvidia-smi --query-gpu=index,name,clocks.max.sm,memory.total --format=csv 2>/dev/null
  echo "cpus $(nproc), commit ${ASTRA_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}, $(date -u +%Y-%m-%dT%H:%MZ)"
  python3 -c "import triton; print('triton', triton.__version__)"; } >> "$OUTDIR/env.txt" 2>&1
cat "$OUTDIR/env.txt"
export ASTRA_SGLANG_CACHE=$(mktemp -d /tmp/moe-screen-cache.XXXX)  # no earlier result: every phase measures
# The Triton cache (cubins) stays out of OUT; a later call on the same (warm) machine finds it: its "cold" phases
# then say how much they found compiled (compile_cached).
WORK=${WORK:-/tmp/moe-screen-work}; mkdir -p "$WORK"
DEADLINE=${DEADLINE:-470}
# Its own process group, so a cut run leaves no screening worker or compile process behind.
setsid timeout --kill-after=15 $((DEADLINE + 60)) python3 benchmarks/moe_screen_bench.py --out "$OUTDIR" \
  --work "$WORK" --deadline "$DEADLINE" --shapes "${SHAPES:-qwen3,mixtral}" --phases "${PHASES:-cold,warm1,warm2,tiers}" \
  --buckets "${BUCKETS:-1,16,64,256,1024,4096}" --warm "${WARM:-600}" --screen-budget "${SCREEN_BUDGET:-120}" \
  ${SIMULATE:+--simulate} > "$OUTDIR/bench.log" 2>&1 &
PID=$!
trap 'kill -- -$PID 2>/dev/null' EXIT INT TERM
wait $PID; rc=$?
grep -E "\] |Error|error" "$OUTDIR/bench.log" | tail -40
if [ $rc -ne 0 ]; then  # cut short: the phases that finished are in moe_screen.jsonl
  echo "moe_screen_bench.py exit code $rc"; tail -30 "$OUTDIR/bench.log"
  python3 benchmarks/moe_screen_bench.py --out "$OUTDIR" --table > /dev/null
fi
cat "$OUTDIR/moe_screen.md"
exit $rc
