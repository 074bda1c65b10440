#!/usr/bin/env bash
# SGLang's own fused MoE tuner as the bar, in one GPU command of at most ~9 minutes (benchmarks/moe_sglang_bar.py):
# SGLang's pick, SGLang's tuner (bounded: its own tune loop over our ranked configs first, then SAMPLE configs of its
# space drawn at random, a process per GPU, Ray served in-process), then the strict evaluator on every GPU: the
# tuner's best against SGLang's pick, split-K on the tuner's best config against it (then the winners again), ours
# (OURS, a config file in SGLang's format) against it; and in the tuner's own process, after its loop, SGLang's pick,
# its best and ours timed by its script's benchmark_config (every dtype; an fp8_w8a8 shape is judged by the strict
# evaluator's fused_moe_fp8 spec, without split-K). RANKED and OURS from a tiers run: benchmarks/moe_tiers_export.py.
# Needs, carried: .stage/ (the SGLang runtime kit, see setup.sh) and TUNER_DIR (default .bar/fused_moe_triton):
# tuning_fused_moe_triton.py and common_utils.py of SGLang's benchmark/kernels/fused_moe_triton/ at the installed
# SGLang's release tag (v0.5.17), never committed.
# MODE=exhaustive: SGLang's tuner's exact answer over its whole space instead of a bounded sample: a cold sample of
# COLD_SAMPLE configs per batch size and GPU (its users' wall, estimated; every GPU samples), then WARM_PROCS
# processes per GPU running its own tune loop over shards of its space into one fresh Triton cache (timings
# discarded), then its tune loop over the whole space, a process per GPU, on that cache; a deadline cut is reported
# with how far its loop got.
# MODE=cold: the cold sample alone (COLD_SAMPLE configs per batch size and GPU, at most COLD_SECONDS): its users'
# wall where an earlier exhaustive run has the best (nothing is evaluated); name both folders in a later TUNER_FROM.
# Usage (GPU machine, repo root): bash benchmarks/gpu/moe_sglang_bar.sh [OUTDIR]
# env: PRESET (mixtral-8x7b-tp2 | qwen3-30b-a3b | deepseek-v2-lite | mixtral-8x7b-tp2-fp8), BATCH_SIZES (1,4,16,64),
#      SAMPLE (24), SEED (0), DEADLINE (400 s for the python part), TUNER_SHARE (0.45 of it for SGLang's tuner;
#      exhaustive: 0.8 by default), GPUS (every visible),
#      RANKED (JSON {batch: [codes]}), OURS, MODE (bounded | full | exhaustive | cold; FULL=1 is MODE=full),
#      WARM_PROCS (cores / GPUs),
#      WARM_SHARE (0.5), COLD_SAMPLE (8), COLD_SECONDS (60), TUNER_FROM (earlier runs' OUTs, space-separated: SGLang's
#      tuner not run again, its best per batch size taken from them; same GPU and shape, e.g. the committed
#      benchmarks/results/2026-11-27-h200/moe-bar/qwen3-30b-a3b-1-64 and qwen3-30b-a3b-64)
# OUTDIR (default $OUT, else /tmp/moe-bar) gets env.txt, bar.log, tuner.json (each batch size's `landscape` and
# `failed`: every config its loop started, its time or why it failed), bar.jsonl, bar.md (printed last) and
# tuner-logs.tgz (every tuner process's log and records); Triton caches stay in BAR_WORK (/tmp/moe-bar-work).
set -u
OUTDIR=${1:-${OUT:-/tmp/moe-bar}}; mkdir -p "$OUTDIR"
source benchmarks/gpu/setup.sh > "$OUTDIR/env.txt" 2>&1
{ nvidia-smi --query-gpu=index,name,clocks.max.sm,memory.total --format=csv
  echo "commit ${ASTRA_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}, $(date -u +%Y-%m-%dT%H:%MZ)"; } >> "$OUTDIR/env.txt"
cat "$OUTDIR/env.txt"
TUNER_DIR=${TUNER_DIR:-.bar/fused_moe_triton}
FROM=(); for dir in ${TUNER_FROM:-}; do FROM+=(--tuner-from "$dir"); done
if [ ${#FROM[@]} -eq 0 ] && [ ! -f "$TUNER_DIR/tuning_fused_moe_triton.py" ]; then
  echo "no SGLang tuner in $TUNER_DIR (carry it: see this script's head)"; exit 2
fi
[ ${#FROM[@]} -gt 0 ] && TUNER_ARGS=("${FROM[@]}") || TUNER_ARGS=(--tuner-dir "$TUNER_DIR")
export ASTRA_SGLANG_CACHE=${ASTRA_SGLANG_CACHE:-/tmp/astra-cache}
DEADLINE=${DEADLINE:-400}
MODE=${MODE:-${FULL:+full}}; MODE=${MODE:-bounded}
[ "$MODE" = exhaustive ] || [ "$MODE" = cold ] && TUNER_SHARE=${TUNER_SHARE:-0.8}
# Its own process group: an interrupted run leaves no tuner or evaluation child behind.
setsid timeout --kill-after=10 $((DEADLINE + 40)) python3 benchmarks/moe_sglang_bar.py "${TUNER_ARGS[@]}" \
  --out "$OUTDIR" --preset "${PRESET:-mixtral-8x7b-tp2}" --batch-sizes "${BATCH_SIZES:-1,4,16,64}" \
  --sample "${SAMPLE:-24}" --seed "${SEED:-0}" --deadline "$DEADLINE" --tuner-share "${TUNER_SHARE:-0.45}" \
  ${GPUS:+--gpus "$GPUS"} \
  ${RANKED:+--ranked "$RANKED"} ${OURS:+--ours "$OURS"} --mode "$MODE" --work "${BAR_WORK:-/tmp/moe-bar-work}" \
  ${WARM_PROCS:+--warm-procs "$WARM_PROCS"} --warm-share "${WARM_SHARE:-0.5}" --cold-sample "${COLD_SAMPLE:-8}" \
  --cold-seconds "${COLD_SECONDS:-60}" > "$OUTDIR/bar.log" 2>&1 &
PID=$!
trap 'kill -- -$PID 2>/dev/null' EXIT INT TERM
wait $PID; rc=$?
# the tuner's many per-process logs in one file
[ -d "$OUTDIR/tuner" ] && tar czf "$OUTDIR/tuner-logs.tgz" -C "$OUTDIR" tuner && rm -rf "$OUTDIR/tuner"
grep -E "Error|error|SGLang's tuner" "$OUTDIR/bar.log" | tail -20
if [ $rc -eq 0 ]; then cat "$OUTDIR/bar.md"
else echo "moe_sglang_bar.py exit code $rc"; tail -40 "$OUTDIR/bar.log"; tar xzOf "$OUTDIR/tuner-logs.tgz" --wildcards '*.log' 2>/dev/null | tail -20
fi
exit $rc
