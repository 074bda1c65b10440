#!/usr/bin/env bash
# Every figure of the README's results table and benchmarks/RESULTS.md, re-measured from scratch on one GPU in
# one command:
#   per_call  benchmarks/per_call.py: each enabled patch's eager call against SGLang's own call, 1/16/64 tokens
#   timed     astra-sglang bench OP: the shipped patch against SGLang's own op (bench's defaults), the paper
#             and quick shape sets, bf16, checked and timed, one op after the other
#   checks    astra-sglang bench OP --no-time: the harness's trials on the specs' edge and held-out shapes in
#             each spec's dtypes (bf16/fp16/fp32 for the first four), against the tool's reference kernel (SGLang's
#             ops refuse or fault at some of them); no timing, so the ops run at once
# then benchmarks/summarize.py. Writes OUT/{per_call,checks,kernels,sources}.jsonl, OUT/per_call.md,
# OUT/RESULTS.md and OUT/run.log, and prints the README's table last.
#
# Usage (GPU machine, repo root, SGLang importable or its runtime kit unpacked as .stage/: see setup.sh; no
# network needed):
#   COMMIT=<git rev-parse --short HEAD of the tree> bash benchmarks/gpu/run_all.sh OUT
# Afterwards, in a checkout: copy OUT/*.jsonl to benchmarks/results/<date>-<gpu>/, run
# `python3 benchmarks/summarize.py` (README table + benchmarks/RESULTS.md) and commit them.
# BUDGET (seconds, default 420) bounds the three steps together (builds come first, outside it): each
# evaluation's harness timeout is cut to its share of what is left (the timed step leaves RESERVE, default
# 100 s, to the checks), and a cut evaluation keeps the shapes it finished (RESULTS.md then says "n of N").
# An op's timed share, by its shape count, is at least what its evaluation takes: TIMED_START (default 25 s: the
# child's start, SGLang's import, the roofline probes) plus TIMED_PER_SHAPE (default 5 s) a shape (an H200 timed
# rope's 7 shapes in ~45 s, topk_softmax's 14 in 46 s), taken from the ops after it only as far as theirs stays;
# a share below that is said (WARN). BUDGET=shapes sizes the budget by the ops' shapes: PER_CALL_S (default 60)
# for per_call, each op's timed minimum, and RESERVE.
# OPS (default: the four shipped ops), SETS (the timed shape sets, default paper+quick) and STEPS (default
# "per_call timed checks") narrow or widen the run; CHECK_SETS (default edge+held_out) are the checked sets,
# PER_CALL_ARGS go to per_call.py, SUMMARIZE=0 leaves out summarize.py (benchmarks/gpu/families.sh sets them). The model-shape column of benchmarks/RESULTS.md comes from a
# second, longer command, `STEPS=timed SETS=models bash benchmarks/gpu/run_all.sh OUT2` (its rows go to
# OUT2/kernels-models.jsonl; append its sources.jsonl line to the first run's).
set -u
OUT=${1:?usage: run_all.sh OUTDIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
exec > >(tee -a "$OUT/run.log") 2>&1
TEE=$!

# Steps run in sessions of their own (`step`), so that a signal to this script's group reaches only the script,
# whose trap (stop_all.sh) then ends each step's whole tree; a step's harness child is never orphaned.
source benchmarks/gpu/stop_all.sh
# step LOG CMD...: CMD in a session of its own, output to LOG, waited for (a trapped signal interrupts the wait)
step() {
  local log=$1; shift
  setsid "$@" > "$log" 2>&1 &
  wait $!
}

BUDGET=${BUDGET:-420}
RESERVE=${RESERVE:-100}
OPS=${OPS:-silu_and_mul fused_add_rmsnorm rmsnorm merge_attn_states_lse}
SETS=${SETS:-paper+quick}
STEPS=${STEPS:-per_call timed checks}
TIMED_START=${TIMED_START:-25}
TIMED_PER_SHAPE=${TIMED_PER_SHAPE:-5}
TIMED=kernels.jsonl
[ "$SETS" = paper+quick ] || TIMED="kernels-${SETS//+/-}.jsonl"
has() { case " $STEPS " in *" $1 "*) return 0;; esac; return 1; }
T0=$(date +%s)
# bench's default candidate is the user folder's patch where it has one: an empty user folder of this run's own,
# so the timed rows are the shipped patches' (the recording scripts take only "patches/OP" rows)
export ASTRA_SGLANG_HOME="$OUT/home"
source benchmarks/gpu/setup.sh
DATE=$(date -u +%F)
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
COMMIT=${COMMIT:-${ASTRA_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}}
SOFTWARE=$(python3 - <<'PY'
import subprocess
from importlib import metadata
import torch
def v(dist):
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "absent"
nvcc = subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout.split("release ")[-1].split(",")[0]
print(f"torch {torch.__version__}, nvcc {nvcc}, SGLang {v('sglang')} (sglang-kernel {v('sglang-kernel')}, "
      f"flashinfer-python {v('flashinfer-python')})")
PY
)
# Builds first, outside the budget and in parallel: every kernel the steps load (cached by source and flags)
# and the C++ fast path per_call.py goes through.
python3 - $OPS <<'PY'
import json, sys
from astra_sglang.harness.isolate import prebuild
from astra_sglang.patching import fastcall
from astra_sglang.kernels.variants import first_kernel
from astra_sglang.paths import templates_dir
sources = [(str(templates_dir() / "probes.cu"), {}, None)]
for op in sys.argv[1:]:
    manifest = json.load(open(f"patches/{op}/manifest.json"))
    first, defines = first_kernel(op)  # a variant op's is the base op's file with its defines
    sources += [(f"patches/{op}/{manifest['kernel']}", manifest["defines"], None), (str(first), defines, None)]
from concurrent.futures import ThreadPoolExecutor
with ThreadPoolExecutor(1) as pool:  # the C++ fast path (a torch extension) builds alongside the kernels
    fast = pool.submit(fastcall.build)
    prebuild(sources)
    try:
        fast.result()
    except Exception as exc:  # per_call.py then takes the Python path and says so in its rows
        print(f"the C++ fast path did not build: {exc}")
PY
shapes_of() {  # shapes_of OP SETS: how many shapes the sets hold (the timed step splits its time by them)
  python3 -c "from astra_sglang.specs.registry import get_spec, resolve_shapes as r; print(len(r(get_spec('$1'), '$2')))"
}
declare -A COUNT NEED; total=0; needs=0
for op in $OPS; do  # each op's timed shapes, and the least time its timed evaluation takes
  COUNT[$op]=$(shapes_of "$op" "$SETS"); NEED[$op]=$((TIMED_START + TIMED_PER_SHAPE * COUNT[$op]))
  total=$((total + COUNT[$op])); needs=$((needs + NEED[$op]))
done
[ "$BUDGET" = shapes ] && BUDGET=$((${PER_CALL_S:-60} + needs + RESERVE))
START=$(date +%s)
DEADLINE=$((START + BUDGET))
echo "run_all: $GPU, $SOFTWARE, commit $COMMIT, budget ${BUDGET}s, setup and builds $((START - T0))s"

left() { echo $((DEADLINE - $(date +%s))); }
# source FILE KIND SETS OPS COMMAND: one line of OUT/sources.jsonl (what summarize.py attributes the rows to)
source_line() {
  python3 - "$@" "$DATE" "$GPU" "$COMMIT" "$SOFTWARE" >> "$OUT/sources.jsonl" <<'PY'
import json, sys
file, kind, sets, ops, command, date, gpu, commit, software = sys.argv[1:]
print(json.dumps({"file": file, "kind": kind, "sets": [s for s in sets.split("+") if s], "ops": ops.split(),
                  "date": date, "gpu": gpu, "commit": commit, "command": command, "software": software}))
PY
}
dtypes_of() {  # dtypes_of OP: the spec's dtypes, comma-separated (the checks run each; bench refuses any other)
  python3 -c "from astra_sglang.specs.registry import get_spec; print(','.join(get_spec('$1').dtypes))"
}
# bench_op SECONDS OP ARGS...: one isolated evaluation, its harness timeout cut to SECONDS
bench_op() {
  local seconds=$1 op=$2; shift 2
  if [ "$seconds" -lt 20 ]; then echo "SKIPPED $op $*: ${seconds}s left of the budget"; return 0; fi
  step "$OUT/step.log" timeout -k 10 $((seconds + 30)) astra-sglang bench "$op" --timeout "$seconds" "$@"
  grep -E "^[a-z0-9_]+: |geomean|FAILED|error|results:" "$OUT/step.log"
  rm -f "$OUT/step.log"
}

if has per_call; then
  echo "== per_call (t=$(( $(date +%s) - START ))s)"
  t=$(left); [ "$t" -gt 150 ] && t=150
  PER_CALL="python3 benchmarks/per_call.py OUT --tokens 1,16,64"
  # shellcheck disable=SC2086  # PER_CALL_ARGS: more arguments, e.g. --patches DIR (families.sh)
  step "$OUT/per_call.log" timeout -k 10 "$t" python3 benchmarks/per_call.py "$OUT" --tokens 1,16,64 ${PER_CALL_ARGS:-}
  code=$?
  echo "per_call exit code $code"; grep -E "^(ERROR|SKIP|note|WARN)" "$OUT/per_call.log"
  [ "$code" = 0 ] || tail -3 "$OUT/per_call.log"
  rm -f "$OUT/per_call.log"
  source_line per_call.jsonl per_call "" "$OPS" "$PER_CALL"
fi

if has timed; then
  echo "== timed (t=$(( $(date +%s) - START ))s)"
  TIMED_ARGS="--shapes $SETS --dtypes bf16"
  reserve=0; has checks && reserve=$RESERVE
  for op in $OPS; do  # each op gets its share of what is left, by shape count, and at least its NEED if it can
    needs=$((needs - NEED[$op]))  # what the ops after it need
    t=$(( ($(left) - reserve) * COUNT[$op] / total )); total=$((total - COUNT[$op]))
    spare=$(( $(left) - reserve - needs ))
    [ "$t" -lt "${NEED[$op]}" ] && t=$(( spare < NEED[$op] ? (spare > t ? spare : t) : NEED[$op] ))
    [ "$t" -lt "${NEED[$op]}" ] && echo "WARN timed $op: ${t}s of the budget for about ${NEED[$op]}s of work (BUDGET=shapes sizes it)"
    bench_op "$t" "$op" $TIMED_ARGS --out "$OUT/$TIMED"
  done
  source_line "$TIMED" timed "$SETS" "$OPS" "astra-sglang bench OP $TIMED_ARGS"
fi

if has checks; then
  echo "== checks (t=$(( $(date +%s) - START ))s)"
  CHECK_SETS=${CHECK_SETS:-edge+held_out}
  CHECK_ARGS="--shapes $CHECK_SETS --dtypes SPEC --baseline reference --no-time"  # SPEC: each op's (dtypes_of)
  t=$(left); [ "$t" -gt 150 ] && t=150
  pids=()
  for op in $OPS; do  # correctness only: the ops share the GPU at once, each in a session and log of its own
    if [ "$t" -lt 20 ]; then echo "SKIPPED checks of $op: ${t}s left of the budget"; continue; fi
    setsid timeout -k 10 $((t + 30)) astra-sglang bench "$op" --timeout "$t" ${CHECK_ARGS/SPEC/$(dtypes_of "$op")} \
      --out "$OUT/checks-$op.jsonl" \
      > "$OUT/checks-$op.log" 2>&1 &
    pids+=($!)
  done
  [ ${#pids[@]} -gt 0 ] && wait "${pids[@]}"
  for op in $OPS; do
    [ -f "$OUT/checks-$op.log" ] && grep -E "^[a-z0-9_]+: |geomean|FAILED|error" "$OUT/checks-$op.log"
    [ -f "$OUT/checks-$op.jsonl" ] && cat "$OUT/checks-$op.jsonl" >> "$OUT/checks.jsonl"
    rm -f "$OUT/checks-$op.log" "$OUT/checks-$op.jsonl"
  done
  source_line checks.jsonl checks "$CHECK_SETS" "$OPS" "astra-sglang bench OP ${CHECK_ARGS/SPEC/<the spec\'s dtypes>}"
fi

echo "== done: $(( $(date +%s) - START ))s of the ${BUDGET}s budget, $(( $(date +%s) - T0 ))s in all"
[ "${SUMMARIZE:-1}" = 1 ] && python3 benchmarks/summarize.py "$OUT" --out "$OUT"
