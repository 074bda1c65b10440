#!/usr/bin/env bash
# The no-LLM tuner on extracted originals, in one command (~4-5 min on an H100): for each op, extract SGLang's /
# flashinfer's own kernel, derive knobs from its launch path (block sizes, vector widths), tune them per shape
# (`astra-sglang optimize OP --tuner --from-extracted=SOURCE`), and time the tuned kernel against SGLang's op on
# every gate shape; then OUT/knobs.md (benchmarks/knobs_table.py): per op the derived knobs and one row per shape.
#
# Usage (GPU machine, repo root, SGLang's runtime kit unpacked as .stage/: see setup.sh; no network needed):
#   COMMIT=<git rev-parse --short HEAD of the tree> bash benchmarks/gpu/knobs.sh OUT
# Extraction and knob derivation parse with libclang, which the kit does not hold: put its two wheels in the
# carried folder first (CPU machine, registry reachable), and this script installs them from there:
#   python3 -m pip download --no-deps --only-binary=:all: libclang==18.1.1 ziglang==0.13.0 -d .stage/knobs-wheels
# Or derive on the CPU machine and carry the results: `astra-sglang extract OP --from SOURCE --out
# .stage/knobbed/OP --knobs` per op; an op with .stage/knobbed/OP/knobbed.cu is tuned from that file.
# OPS (default "gelu_and_mul:sglang rmsnorm:flashinfer", OP:SOURCE pairs), ROUNDS (default 1: the Latin square
# alone), CONFIGS (default 5: ASTRA_TUNER_MAX_CONFIGS, the original always among them), FINAL_S (default 40: the final evaluation's harness
# timeout; a cut one keeps the shapes it finished) and OP_S (default 150: each op's whole run) bound the time.
set -u
OUT=${1:?usage: knobs.sh OUTDIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
exec > >(tee -a "$OUT/run.log") 2>&1
TEE=$!
source benchmarks/gpu/stop_all.sh  # evaluations run in sessions of their own: end them all on exit

OPS=${OPS:-gelu_and_mul:sglang rmsnorm:flashinfer}
ROUNDS=${ROUNDS:-1}
OP_S=${OP_S:-150}
export ASTRA_TUNER_MAX_CONFIGS=${CONFIGS:-5} ASTRA_TUNER_FINAL_TIMEOUT_S=${FINAL_S:-40}
T0=$(date +%s)
source benchmarks/gpu/setup.sh
if ! python3 -c "import clang.cindex, ziglang" 2>/dev/null && ls .stage/knobs-wheels/*.whl >/dev/null 2>&1; then
  mkdir -p /tmp/site
  python3 -m pip install -q --no-deps --no-index --target /tmp/site .stage/knobs-wheels/*.whl 2>&1 | grep -v -i warning
  case ":${PYTHONPATH:-}:" in *:/tmp/site:*) ;; *) export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH};; esac
fi
python3 -c "import clang.cindex, ziglang" 2>/dev/null && echo "libclang: importable" \
  || echo "libclang: not importable; only ops with .stage/knobbed/OP/knobbed.cu can run"
DATE=$(date -u +%F)
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
COMMIT=${COMMIT:-${ASTRA_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}}

names=()
for item in $OPS; do
  op=${item%%:*} source=${item#*:}
  names+=("$op")
  if [ -f ".stage/knobbed/$op/knobbed.cu" ]; then
    mkdir -p "$OUT/$op/extracted" && cp ".stage/knobbed/$op/"* "$OUT/$op/extracted/"
    start=(--from "$OUT/$op/extracted/knobbed.cu")
  else
    start=("--from-extracted=$source")
  fi
  echo "== $op: $(date -u +%T), ${start[*]}"
  # --baseline is left to the tuner: SGLang's own op wherever sgl_kernel imports (it says which)
  timeout -k 10 "$OP_S" astra-sglang optimize "$op" --tuner "${start[@]}" --rounds "$ROUNDS" --out "$OUT/$op" \
    || echo "== $op: exit $? (see above; knobs.md says what finished)"
done

python3 benchmarks/knobs_table.py "$OUT" "$DATE" "$GPU" "$COMMIT" \
  "OPS='$OPS' ROUNDS=$ROUNDS CONFIGS=$ASTRA_TUNER_MAX_CONFIGS FINAL_S=$ASTRA_TUNER_FINAL_TIMEOUT_S bash benchmarks/gpu/knobs.sh OUT" \
  "${names[@]}"
echo "total $(( $(date +%s) - T0 )) s; table: $OUT/knobs.md"
