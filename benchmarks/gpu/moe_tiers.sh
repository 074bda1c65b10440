#!/usr/bin/env bash
# Fused MoE's two tiers on a chosen set of the host's GPUs, within DEADLINE, resumable (benchmarks/moe_tiers_bench.py):
# SGLang's whole tuning space and the split-K knob's variants screened per batch size (Qwen3-30B-A3B 128x768x2048
# top-8, Mixtral-8x7B 8x14336x4096 top-2, bf16), a worker per GPU and shape, then the strict isolated evaluator
# judges the finalists against SGLang's shipped pick. Batch sizes that do not fit the deadline are left for a resumed
# call: give the earlier OUTDIR back as RUNS (on the same warm machine the Triton cache in WORK is kept: no compile
# again). Every screened config is in OUTDIR/screen/*.jsonl as it comes: a cut run loses nothing.
# Usage (repo root; the SGLang runtime kit carried as .stage: setup.sh):
#   ASTRA_COMMIT=<commit> GPUS=2,3 DEADLINE=480 bash benchmarks/gpu/moe_tiers.sh OUTDIR
#   ASTRA_COMMIT=<commit> GPUS=2,3 DEADLINE=480 RUNS=<earlier OUTDIR> bash benchmarks/gpu/moe_tiers.sh OUTDIR2
# env: GPUS (ids of this host's GPUs; unset: all), DEADLINE (seconds, 480), SHAPES (qwen3,mixtral; also the bar's
#      presets: mixtral-8x7b-tp2, qwen3-30b-a3b, deepseek-v2-lite, mixtral-8x7b-tp2-fp8), BUCKETS (batch
#      sizes tried first: none), EXTRA (tried next: all of SGLang's 18; a batch size joins while the plan fits the
#      deadline, those farthest from their floor first), KNOB (splitk; empty:
#      none), FINALISTS (2), KNOB_FINALISTS (1), CORES (compile processes; default: the cores this process is
#      pinned to, else this GPU share of the CPU cores, less one per GPU), RUNS (an earlier OUTDIR to continue),
#      WORK (Triton cache, /tmp/moe-tiers-work, kept), SIMULATE=1 (no GPU: the cost model's times), REQUIRE=1
#      (refuse to start, exit code 3, where the plan defers a BUCKETS batch size: the error names the deadline that fits)
# OUTDIR (default $OUT, else /tmp/moe-tiers) gets env.txt, bench.log, tiers.md, plan.json, units.jsonl,
# verdicts.jsonl, specializations.jsonl, screen/, strict/.
set -u
OUTDIR=${1:-${OUT:-/tmp/moe-tiers}}; mkdir -p "$OUTDIR"
if [ -n "${GPUS:-}" ]; then  # set first: no process of this call touches another GPU (setup.sh's check included)
  export CUDA_VISIBLE_DEVICES=$GPUS  # this process and its children see only these (a worker pins one of them)
fi
if [ -z "${SIMULATE:-}" ]; then
  source benchmarks/gpu/setup.sh > "$OUTDIR/env.txt" 2>&1
  { nvidia-smi --query-gpu=index,name,clocks.max.sm,memory.total --format=csv 2>/dev/null
    python3 -c "import triton; print('triton', triton.__version__)"; } >> "$OUTDIR/env.txt" 2>&1
fi
ALL=$( (nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null || true) | wc -l)
MINE=$(echo "${GPUS:-${CUDA_VISIBLE_DEVICES:-0,1}}" | tr ',' '\n' | grep -c .)
[ "$ALL" -ge "$MINE" ] || ALL=$MINE
# a process pinned to its own cores (host_split.sh's taskset: nproc below the host's) has them all; else this
# GPU share of the host's (the 2026-11-27 bar job took 22 of its 48 pinned cores by the share rule)
if [ "$(nproc)" -lt "$(nproc --all)" ]; then SHARE=$(nproc); else SHARE=$(( $(nproc) * MINE / ALL )); fi
CORES=${CORES:-$(( SHARE - MINE ))}; [ "$CORES" -ge 1 ] || CORES=1
export ASTRA_COMMIT=${ASTRA_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
echo "GPUs ${GPUS:-all} of $ALL, $CORES compile processes, cpus $(nproc), commit $ASTRA_COMMIT," \
  "$(date -u +%Y-%m-%dT%H:%MZ)" \
  >> "$OUTDIR/env.txt"
cat "$OUTDIR/env.txt"
WORK=${WORK:-/tmp/moe-tiers-work}; mkdir -p "$WORK"
DEADLINE=${DEADLINE:-480}
ARGS=(--out "$OUTDIR" --work "$WORK" --deadline "$DEADLINE" --shapes "${SHAPES:-qwen3,mixtral}"
      --buckets "${BUCKETS:-}" --extra "${EXTRA:-all}" --knob "${KNOB-splitk}" --finalists "${FINALISTS:-2}"
      --knob-finalists "${KNOB_FINALISTS:-1}" --cores "$CORES")
[ -n "${RUNS:-}" ] && ARGS+=(--resume "$RUNS")
[ -n "${SIMULATE:-}" ] && ARGS+=(--simulate)
[ -n "${REQUIRE:-}" ] && ARGS+=(--require)  # exit 3 before any worker where the plan defers a BUCKETS batch size
# Its own process group, so a cut run leaves no screening worker or compile process behind.
P0=$(date +%s.%N)
setsid timeout --kill-after=15 $((DEADLINE + 60)) python3 benchmarks/moe_tiers_bench.py "${ARGS[@]}" \
  > "$OUTDIR/bench.log" 2>&1 &
PID=$!
trap 'kill -- -$PID 2>/dev/null' EXIT INT TERM
wait $PID; rc=$?
# the tuner's own wall (its process, from start to exit): what a user with the tool installed waits; this script's
# set-up before it (the checkout installed, the SGLang kit) is the machine's, not the tuner's
awk -v a="$P0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f\n", b - a }' > "$OUTDIR/tuner_wall_s"
grep -E "\] |Error|error" "$OUTDIR/bench.log" | tail -40
if [ $rc -ne 0 ]; then  # an error, or cut: what finished is in the records; the summary is written from them
  echo "moe_tiers_bench.py exit code $rc"; tail -30 "$OUTDIR/bench.log"
  python3 benchmarks/moe_tiers_bench.py "${ARGS[@]}" --table > /dev/null 2>> "$OUTDIR/bench.log"
fi
[ -f "$OUTDIR/tiers.md" ] && cat "$OUTDIR/tiers.md"
exit $rc
