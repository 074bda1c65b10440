#!/usr/bin/env bash
# One GPU command for the evaluator: the in-place figures (GEMM -> op -> GEMM, harness/sandwich.py) beside the
# isolated ones of every enabled shipped patch at its served shapes, against SGLang's own op; then every
# `gpu`-marked test of tests/evaluator (every cheat fixture, the honest kernels, compute-sanitizer); then a
# markdown summary. Optional step `cost`: seconds per evaluation, this tree against an earlier one (.old/).
# Usage (GPU machine, repo root; SGLang importable, or its runtime kit unpacked as .stage/: see setup.sh):
#   bash benchmarks/gpu/evaluator.sh OUT [sandwich] [fixtures] [cost]     (sandwich and fixtures when none named)
# BUDGET (default 540 s) bounds the run: the tests get what the figures left, at least 150 s. MAX_TOKENS
# (default 8192) caps the served shapes timed. DRY_RUN=1 only writes the commands to OUT/commands.txt.
# Writes OUT/sandwich.jsonl (bench rows, both figures per shape), OUT/fixtures.txt (pytest -v), OUT/summary.md,
# OUT/log.txt, OUT/untimed.txt (enabled patches whose spec has no sandwich). Then, on any machine, to leave the
# shapes slower in place to SGLang (patches/*/manifest.json):
#   python3 benchmarks/sandwich_report.py OUT/sandwich.jsonl --defer --source "GPU, DATE, commit C, command"
# `cost` needs the earlier package tree as .old/astra_sglang (mkdir .old && git archive REV astra_sglang | tar -x -C .old).
set -u
OUTDIR=${1:?output dir}
shift
STEPS=${*:-sandwich fixtures}
BUDGET=${BUDGET:-540}
MAX_TOKENS=${MAX_TOKENS:-8192}
mkdir -p "$OUTDIR"
LOG=$OUTDIR/log.txt
run() {  # a command, or its line in OUT/commands.txt (DRY_RUN)
  if [ -n "${DRY_RUN:-}" ]; then echo "$*" >> "$OUTDIR/commands.txt"; else "$@"; fi
}
[ -n "${DRY_RUN:-}" ] || source benchmarks/gpu/setup.sh
export ASTRA_SGLANG_CACHE=${ASTRA_SGLANG_CACHE:-/tmp/astra-cache}
trap 'kill $(jobs -p) 2>/dev/null' EXIT INT TERM
# enabled patches with no neighbours to time them between are named in OUT/untimed.txt (and on the console)
PLAN=$(python3 benchmarks/sandwich_report.py --plan --max-tokens "$MAX_TOKENS" 2> "$OUTDIR/untimed.txt")
cat "$OUTDIR/untimed.txt"
bench() {  # bench SECONDS OP JSONL [args]: the shipped patch against SGLang's op, bf16 (package tree: TREE)
  local limit=$1 op=$2 out=$3
  shift 3
  echo "-- $op $*" >> "$LOG"
  run env PYTHONPATH="${TREE:-${PYTHONPATH:-}}" timeout "$limit" python3 -m astra_sglang.cli bench "$op" \
    --baseline sglang --dtypes bf16 --out "$out" "$@" >> "$LOG" 2>&1
}
if [[ $STEPS == *sandwich* ]]; then
  echo "== warm-up: builds and SGLang's JIT kernels, outside the measured runs"
  while read -r op shapes; do  # in parallel: CPU work; nothing here is measured
    bench 150 "$op" "$OUTDIR/warmup.jsonl" --shapes "${shapes%%,*}" --no-check &
  done <<< "$PLAN"
  wait
  echo "== isolated and in place, at the served shapes up to $MAX_TOKENS tokens"
  while read -r op shapes; do
    bench 90 "$op" "$OUTDIR/sandwich.jsonl" --shapes "$shapes" --sandwich --no-check
    n=$(grep -c "\"kernel\": \"$op\".*\"sandwich\": {" "$OUTDIR/sandwich.jsonl" 2>/dev/null)
    echo "$op: ${n:-0} shapes timed in place"
  done <<< "$PLAN"
fi
if [[ $STEPS == *fixtures* ]]; then
  left=$((BUDGET - SECONDS))
  ((left < 150)) && left=150
  echo "== the evaluator's GPU tests (at most $left s)"
  run timeout "$left" python3 -m pytest -v -p no:cacheprovider -m gpu --durations 0 tests/evaluator \
    > "$OUTDIR/fixtures.txt" 2>&1
  grep -E "(passed|failed)" "$OUTDIR/fixtures.txt" 2>/dev/null | tail -2
fi
if [[ $STEPS == *cost* ]]; then
  echo "== cost: seconds per evaluation and figures, this tree (new) against .old, alternating which goes first"
  order="old new"
  while read -r op shapes; do
    for tree in $order; do
      TREE=""
      [ "$tree" = old ] && TREE=$PWD/.old${PYTHONPATH:+:$PYTHONPATH}
      bench 150 "$op" "$OUTDIR/cost-$tree.jsonl" --shapes quick
    done
    [ "$order" = "old new" ] && order="new old" || order="old new"
  done <<< "$PLAN"
fi
[ -f "$OUTDIR/sandwich.jsonl" ] || [ -n "${DRY_RUN:-}" ] || exit 0
run python3 benchmarks/sandwich_report.py "$OUTDIR/sandwich.jsonl" --fixtures "$OUTDIR/fixtures.txt" \
  --out "$OUTDIR/summary.md"
