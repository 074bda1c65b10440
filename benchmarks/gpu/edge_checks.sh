#!/usr/bin/env bash
# One GPU command for the checks at the edge and the progress lines, where a GPU and SGLang are there: the first
# `launch --dry-run` on a fresh cache (patch kernels and the C++ fast path built at once, its one line with the
# time) and the cached one; `py:` baselines resolved against the installed sgl_kernel (one that is there runs,
# one that is not is one line); bad shapes, knobs and model paths refused before anything is built; the
# optimize GPU check passing on a GPU machine (also with --gpus none) and a short tuner run behind it; bench's
# live line on a terminal. About 6 minutes on an H100 (most of it the first build and the tuner).
# Usage (GPU machine, repo root; .stage/ unpacked as setup.sh expects): bash benchmarks/gpu/edge_checks.sh OUTDIR
# Writes OUTDIR/log.txt (every command's output), OUTDIR/tty.txt (bench on a pseudo-terminal) and prints each
# step's exit code, seconds and last lines.
set -u
OUTDIR=$(realpath -m "${1:?output dir}")
mkdir -p "$OUTDIR"
source benchmarks/gpu/setup.sh
export ASTRA_SGLANG_CACHE=$OUTDIR/cache  # fresh: the first launch builds everything
LOG=$OUTDIR/log.txt
MODEL=$OUTDIR/model  # a config.json is all `--load-format dummy` needs
mkdir -p "$MODEL" && cp tests/fixtures/profile/llama3-8b-8layers.config.json "$MODEL/config.json"
CLI="python3 -m astra_sglang.cli"
run() {  # run SECONDS NAME CMD...: the command's output to the log, its exit code, time and last lines to stdout
  local limit=$1 name=$2 start=$SECONDS; shift 2
  echo "== $name: $*" | tee -a "$LOG"
  timeout -k 10 "$limit" "$@" >> "$LOG" 2>&1
  echo "$name exit code $? in $((SECONDS - start))s"
  tail -3 "$LOG"
}
run 400 launch-first $CLI launch --dry-run --stats-dir "$OUTDIR/stats" -- --model-path "$MODEL" --load-format dummy
run 60 launch-cached $CLI launch --dry-run --stats-dir "$OUTDIR/stats" -- --model-path "$MODEL" --load-format dummy
run 60 launch-no-model $CLI launch --dry-run -- --model-path "$OUTDIR/no-model"        # expect 1, one line
run 60 profile-no-weights $CLI profile -- --model-path "$MODEL"                         # expect 1, one line
run 300 bench-py-baseline $CLI bench rmsnorm --baseline py:sgl_kernel:rmsnorm --shapes quick --dtypes bf16 \
  --out "$OUTDIR/bench.jsonl"                                                            # expect 0
run 120 bench-py-missing $CLI bench rmsnorm --baseline py:sgl_kernel:no_such_op          # expect 1, one line
run 60 bench-knob $CLI bench rmsnorm -D THREADS=100                                      # expect 1, one line
run 60 bench-shape $CLI bench merge_attn_states_lse --shapes 16x32x100                   # expect 1, one line
run 120 preflight-gpus-none python3 -c "
from astra_sglang.optimize.preflight import Preflight, check_harness
check_harness(Preflight(ops=['silu_and_mul'], shapes='paper', baseline=None, gpus='none', ray=None, llm=False,
                        compile_only=False))
print('preflight: a GPU torch sees passes with --gpus none')"                            # expect 0
ASTRA_TUNER_MAX_CONFIGS=2 run 420 optimize-tuner $CLI optimize silu_and_mul --tuner --rounds 1 \
  --out "$OUTDIR/optimize" --patches-dir "$OUTDIR/patches"                               # expect 0 (a winner or none)
if command -v script > /dev/null; then  # the live line: stages and elapsed time, gone when the table prints
  start=$SECONDS
  COLUMNS=120 timeout -k 10 300 script -qc "$CLI bench silu_and_mul --shapes quick --dtypes bf16 --out \
$OUTDIR/tty.jsonl" /dev/null | tr '\r' '\n' | sed 's/\x1b\[[0-9;?]*[A-Za-z]//g' > "$OUTDIR/tty.txt"
  echo "bench-tty in $((SECONDS - start))s; stages shown: $(grep -c 'check\|building\|done' "$OUTDIR/tty.txt")"
  grep -m 3 "check " "$OUTDIR/tty.txt"
else
  echo "bench-tty skipped: no script(1) here"
fi
