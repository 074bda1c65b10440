#!/usr/bin/env bash
# Fused MoE's screening tier on the GPU machine, one command of at most ~9 minutes (benchmarks/moe_screen_bench.py):
#   tiers (Qwen3-30B-A3B 128x768x2048 top-8 and Mixtral 8x14336x4096 top-2, bf16) in their own process on GPUs 2..
#     (4-GPU host) or GPU 1 (2-GPU host) from the start (benchmarks/moe_tiers_bench.py): SGLang's whole space per
#     batch size (BUCKETS first, SGLang's other batch sizes next, while the deadline allows), the isolated evaluator
#     judging the finalists against SGLang's shipped pick. PHASES=tiers alone runs benchmarks/gpu/moe_tiers.sh
#     (GPUS, RUNS: a chosen set of GPUs, a resumed run).
#   beside them, on GPU 0 (and 1), Qwen3 at batch 64 with one worker per GPU for the whole run:
#     cold   SGLang's whole tuning space, Triton compiling ahead on the CPU cores (empty cache)
#     warm1  the first WARM configs on one GPU;  warm2  the same on two GPUs (on a 2-GPU host once the tiers end)
# Prints configs timed/s per GPU, the full-space wall, the two-GPU speedup (wall and timed part), the compile-ahead
# hit rate, the two tiers; FAILED lines and exit code 1 where most configs of a phase fail at one stage.
# Usage (repo root, an nvidia-h100-x2/x4 or h200-x2/x4 machine, the SGLang runtime kit carried as .stage: setup.sh):
#   ASTRA_COMMIT=<commit of the tree> bash benchmarks/gpu/moe_screen.sh [OUTDIR]
# env: ASTRA_COMMIT (the commit the figures name; else git's HEAD, stale where .git was copied from elsewhere),
#      DEADLINE (seconds for the bench's phases, 470), SHAPES (the tiers' shapes, qwen3,mixtral), SCALE_SHAPES
#      (qwen3), PHASES (cold,warm1,warm2,tiers), BUCKETS (the tiers' batch sizes tried first: none), WARM (600),
#      SIMULATE=1 (no GPU), WORK (Triton caches, /tmp/moe-screen-work: emptied first, so that the cold phase is cold)
# OUTDIR (default $OUT, else /tmp/moe-screen) gets env.txt, bench.log, moe_screen.jsonl, moe_screen.md, tune-*/,
# tiers/ (the tiers process's log, records and tiers.md).
set -u
if [ "${PHASES:-}" = tiers ]; then exec bash benchmarks/gpu/moe_tiers.sh "$@"; fi
OUTDIR=${1:-${OUT:-/tmp/moe-screen}}; mkdir -p "$OUTDIR"
source benchmarks/gpu/setup.sh > "$OUTDIR/env.txt" 2>&1
{ nvidia-smi --query-gpu=index,name,clocks.max.sm,memory.total --format=csv 2>/dev/null
  echo "cpus $(nproc), commit ${ASTRA_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}, $(date -u +%Y-%m-%dT%H:%MZ)"
  python3 -c "import triton; print('triton', triton.__version__)"; } >> "$OUTDIR/env.txt" 2>&1
cat "$OUTDIR/env.txt"
export ASTRA_SGLANG_CACHE=$(mktemp -d /tmp/moe-screen-cache.XXXX)  # no earlier result: every phase measures
# The Triton caches (cubins) stay out of OUT, and start empty: the cold phase compiles everything.
WORK=${WORK:-/tmp/moe-screen-work}; rm -rf "$WORK"; mkdir -p "$WORK"
export ASTRA_COMMIT=${ASTRA_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
DEADLINE=${DEADLINE:-470}
# Its own process group, so a cut run leaves no screening worker or compile process behind.
setsid timeout --kill-after=15 $((DEADLINE + 60)) python3 benchmarks/moe_screen_bench.py --out "$OUTDIR" \
  --work "$WORK" --deadline "$DEADLINE" --shapes "${SHAPES:-qwen3,mixtral}" --scale-shapes "${SCALE_SHAPES:-qwen3}" \
  --phases "${PHASES:-cold,warm1,warm2,tiers}" \
  --buckets "${BUCKETS:-}" --warm "${WARM:-600}" \
  ${SIMULATE:+--simulate} > "$OUTDIR/bench.log" 2>&1 &
PID=$!
trap 'kill -- -$PID 2>/dev/null' EXIT INT TERM
wait $PID; rc=$?
grep -E "\] |Error|error|FAILED" "$OUTDIR/bench.log" | tail -40
[ -f "$OUTDIR/tiers/bench.log" ] && { echo "--- tiers"; grep -E "\] |Error|FAILED" "$OUTDIR/tiers/bench.log" | tail -30; }
if [ $rc -ne 0 ]; then  # FAILED, or cut short: the phases that finished are in moe_screen.jsonl
  echo "moe_screen_bench.py exit code $rc"; tail -30 "$OUTDIR/bench.log"
  [ -f "$OUTDIR/moe_screen.md" ] || python3 benchmarks/moe_screen_bench.py --out "$OUTDIR" --table > /dev/null
fi
cat "$OUTDIR/moe_screen.md"
exit $rc
