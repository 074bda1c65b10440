#!/usr/bin/env bash
# Every figure of the README's results table and benchmarks/RESULTS.md, re-measured from scratch on one GPU in
# one command:
#   per_call  benchmarks/per_call.py: each enabled patch's eager call against SGLang's own call, 1/16/64 tokens
#   checks    astra-sglang bench OP --no-time: the harness's trials on the specs' edge and held-out shapes in
#             bf16/fp16/fp32, against the tool's reference kernel (SGLang's ops refuse or fault at some of them)
#   timed     astra-sglang bench OP: the shipped patch against SGLang's own op (bench's defaults), the paper
#             and model shape sets, bf16, checked and timed
# then benchmarks/summarize.py. Writes OUT/{per_call,checks,kernels,sources}.jsonl, OUT/per_call.md,
# OUT/RESULTS.md and OUT/run.log (8 files at most), and prints the README's table last.
#
# Usage (GPU machine, repo root, the SGLang runtime kit carried as .stage/; no network needed):
#   COMMIT=<git rev-parse --short HEAD of the tree> bash benchmarks/gpu/run_all.sh OUT
# Afterwards, in a checkout: copy OUT/*.jsonl to benchmarks/results/<date>-<gpu>/, run
# `python3 benchmarks/summarize.py` (README table + benchmarks/RESULTS.md) and commit the three.
# BUDGET (seconds, default 450) bounds the three steps together: each evaluation's harness timeout is cut to
# what is left, and a cut evaluation keeps the shapes it finished (RESULTS.md then says "n of N").
# OPS (default: the four shipped ops) and SETS (default paper+models) narrow the run.
set -u
OUT=${1:?usage: run_all.sh OUTDIR}
# Own process group, so that the trap below ends everything this script started.
if [ -z "${ASTRA_RUN_ALL_GROUP:-}" ]; then
  ASTRA_RUN_ALL_GROUP=1 exec setsid -w bash "$0" "$@"
fi
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
exec > >(tee -a "$OUT/run.log") 2>&1

stop_sessions() {
  # Harness children run in sessions of their own (a candidate must not signal its parent): end those that
  # this group's processes started.
  for pid in $(pgrep -g $$); do
    for child in $(pgrep -P "$pid"); do
      [ "$(ps -o sid= -p "$child" | tr -d ' ')" = "$child" ] && kill -KILL -- "-$child" 2>/dev/null
    done
  done
}
trap stop_sessions EXIT
trap 'stop_sessions; trap - EXIT; kill -TERM -- -$$' INT TERM

BUDGET=${BUDGET:-450}
OPS=${OPS:-silu_and_mul fused_add_rmsnorm rmsnorm merge_attn_states_lse}
SETS=${SETS:-paper+models}
T0=$(date +%s)
source benchmarks/gpu/setup.sh
DATE=$(date -u +%F)
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
COMMIT=${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
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
from astra_sglang.paths import kernels_dir, templates_dir
sources = [(str(templates_dir() / "probes.cu"), {}, None)]
for op in sys.argv[1:]:
    manifest = json.load(open(f"patches/{op}/manifest.json"))
    sources += [(f"patches/{op}/{manifest['kernel']}", manifest["defines"], None), (str(kernels_dir() / f"{op}.cu"), {}, None)]
prebuild(sources)
fastcall.build()
PY
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
shapes_of() {  # shapes_of OP SETS: how many shapes the sets hold (the timed step splits its time by them)
  python3 -c "from astra_sglang.specs.registry import get_spec, resolve_shapes as r; print(len(r(get_spec('$1'), '$2')))"
}
# bench_op SECONDS OP ARGS...: one isolated evaluation, its harness timeout cut to SECONDS
bench_op() {
  local seconds=$1 op=$2; shift 2
  if [ "$seconds" -lt 20 ]; then echo "SKIPPED $op $*: ${seconds}s left of the budget"; return 0; fi
  timeout -k 10 $((seconds + 30)) astra-sglang bench "$op" --timeout "$seconds" "$@" 2>&1 \
    | grep -E "^[a-z_]+: |geomean|FAILED|error|results:" || true
}

echo "== per_call (t=$(( $(date +%s) - START ))s)"
t=$(left); [ "$t" -gt 150 ] && t=150
PER_CALL="python3 benchmarks/per_call.py OUT --tokens 1,16,64"
timeout -k 10 "$t" python3 benchmarks/per_call.py "$OUT" --tokens 1,16,64 > "$OUT/per_call.log" 2>&1
code=$?
echo "per_call exit code $code"; grep -E "^(ERROR|SKIP|note|WARN)" "$OUT/per_call.log"
[ "$code" = 0 ] || tail -3 "$OUT/per_call.log"
rm -f "$OUT/per_call.log"
source_line per_call.jsonl per_call "" "$OPS" "$PER_CALL"

echo "== checks (t=$(( $(date +%s) - START ))s)"
CHECK_ARGS="--shapes edge+held_out --dtypes bf16,fp16,fp32 --baseline reference --no-time"
for op in $OPS; do
  t=$(left); [ "$t" -gt 60 ] && t=60
  bench_op "$t" "$op" $CHECK_ARGS --out "$OUT/checks.jsonl"
done
source_line checks.jsonl checks edge+held_out "$OPS" "astra-sglang bench OP $CHECK_ARGS"

echo "== timed (t=$(( $(date +%s) - START ))s)"
TIMED_ARGS="--shapes $SETS --dtypes bf16"
declare -A COUNT; total=0
for op in $OPS; do COUNT[$op]=$(shapes_of "$op" "$SETS"); total=$((total + COUNT[$op])); done
for op in $OPS; do  # each op gets its share of what is left, by shape count
  t=$(( $(left) * COUNT[$op] / total )); total=$((total - COUNT[$op]))
  bench_op "$t" "$op" $TIMED_ARGS --out "$OUT/kernels.jsonl"
done
source_line kernels.jsonl timed "$SETS" "$OPS" "astra-sglang bench OP $TIMED_ARGS"

echo "== done: $(( $(date +%s) - START ))s of the ${BUDGET}s budget, $(( $(date +%s) - T0 ))s in all"
python3 benchmarks/summarize.py "$OUT" --out "$OUT"
