#!/usr/bin/env bash
# Search throughput on the GPU machine, one command of about 7 minutes (benchmarks/search_bench.py):
#   sequential / pool-1gpu / pool-2gpu   fresh knob variants of silu_and_mul's shipped kernel, evaluated one at a
#                                        time (each building first) against the pool (nvcc ahead of one worker per
#                                        GPU); pool-2gpu only where the machine has two GPUs
#   loop-paper / loop-population-1gpu    the agent loop driven by a scripted model that replays template-generated
#                                        kernels (some deliberately wrong or broken) at LATENCY s a request: one
#                                        candidate a round against 4 a round (2 plans, 1 repair)
# Usage (repo root, GPU machine, runtime kit carried in .stage): bash benchmarks/gpu/search_bench.sh [OUTDIR]
# env: BUDGET (seconds for all arms, 300), LATENCY (5), ARMS (a subset, e.g. loop-paper,loop-population-2gpu),
#      SIMULATE=1 (simulated builds and GPU time: checks this script on a machine without a GPU)
# OUTDIR (default $OUT, else /tmp/search-bench) gets env.txt, search.log, search.jsonl, search.md; prints the table last.
set -u
OUTDIR=${1:-${OUT:-/tmp/search-bench}}; mkdir -p "$OUTDIR"
source benchmarks/gpu/setup.sh > "$OUTDIR/env.txt" 2>&1
{ nvidia-smi --query-gpu=index,name,clocks.max.sm,memory.total --format=csv
  echo "commit ${ASTRA_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}, $(date -u +%Y-%m-%dT%H:%MZ)"; } >> "$OUTDIR/env.txt"
cat "$OUTDIR/env.txt"
export ASTRA_SGLANG_CACHE=$(mktemp -d /tmp/search-cache.XXXX)  # empty build cache: every candidate's nvcc runs
WORK=$(mktemp -d /tmp/search-work.XXXX)
# Its own process group, so an interrupted run leaves no pool worker behind (evaluation children end by themselves).
setsid timeout --kill-after=15 450 python3 benchmarks/search_bench.py --out "$OUTDIR" --work "$WORK" \
  --budget "${BUDGET:-300}" --latency "${LATENCY:-5}" ${ARMS:+--arms "$ARMS"} ${SIMULATE:+--simulate} \
  > "$OUTDIR/search.log" 2>&1 &
PID=$!
trap 'kill -- -$PID 2>/dev/null' EXIT INT TERM
wait $PID; rc=$?
grep -E "^arm |Error|error" "$OUTDIR/search.log" | tail -20
if [ $rc -eq 0 ]; then cat "$OUTDIR/search.md"
else  # cut short (the timeout): the arms that finished are in search.jsonl
  echo "search_bench.py exit code $rc"; tail -30 "$OUTDIR/search.log"
  [ -s "$OUTDIR/search.jsonl" ] && python3 benchmarks/search_bench.py --out "$OUTDIR" --table
fi
exit $rc
