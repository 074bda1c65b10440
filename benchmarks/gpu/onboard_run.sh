#!/usr/bin/env bash
# Ops the project does not ship, onboarded on a GPU as a user would, in one command (about 8 minutes on an H100):
#   ops       five ops of four families, each from a hand-written calls file (tests/fixtures/onboard/) to `onboard`
#             to a `bench` table against SGLang's op, two commands each and no file edited: a norm
#             (flashinfer.norm:layernorm), an activation (sglang.srt.layers.activation:relu2, SGLang's JIT kernel),
#             a sampling op (flashinfer.sampling:top_k_renorm_probs), an FP8 quant (sgl_kernel:sgl_per_token_quant_fp8)
#             and a rope variant (flashinfer.rope:apply_rope_pos_ids_inplace). On a GPU, onboard checks the op there
#             before it writes the spec (its dtypes, its tolerance from its own run-to-run and upcast differences,
#             the proposed reference against it) and writes the figures into it.
#   record    a live SGLang server (the kit's 8-layer Llama-3-8B-shaped model, dummy weights, no patch) under
#             `launch --record-calls flashinfer.norm:rmsnorm` and a short load; the calls file as recorded ->
#             `onboard ... --name fi_rmsnorm` -> `bench fi_rmsnorm`
#   optimize  `optimize fi_rmsnorm` (the built-in tuner, from its original extracted through the generic launcher;
#             where libclang is not importable here, from the shipped rmsnorm kernel: --from patches/rmsnorm/kernel.cu)
#             to a patch in the user folder
#   engage    `launch --patches HOME/patches` (that patch alone), a short load, `report`: its calls and kernel calls
# Writes OUT/log.txt, OUT/<step>.txt (each command's output), OUT/<op>.bench.jsonl, OUT/calls.json, OUT/home/ (the
# user folder: specs with the first GPU run's figures, adapters, patches), OUT/summary.md (each command, its exit
# code, its last line). STEPS="ops record optimize engage" (default all) runs a subset; HOME_FROM=DIR starts from an
# earlier run's user folder (OUT/home), so that `STEPS="optimize engage"` goes on from another call's record step.
#
# Usage (GPU machine, repo root, SGLang's runtime kit unpacked as .stage/: see setup.sh; no network needed):
#   bash benchmarks/gpu/onboard_run.sh OUT
# Extraction parses with libclang, which the kit does not hold: carry its wheels (CPU machine, registry reachable):
#   python3 -m pip download --no-deps --only-binary=:all: libclang==18.1.1 ziglang==0.13.0 -d .stage/knobs-wheels
set -u
OUT=${1:?usage: onboard_run.sh OUTDIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
exec > >(tee -a "$OUT/log.txt") 2>&1
TEE=$!
source benchmarks/gpu/stop_all.sh  # evaluations and servers run in sessions of their own: end them all on exit
T0=$(date +%s)
elapsed() { echo $(( $(date +%s) - T0 )); }
source "${SETUP:-benchmarks/gpu/setup.sh}"  # SETUP=/dev/null: this environment as it is (the script's CPU test)
if ! python3 -c "import clang.cindex, ziglang" 2>/dev/null && ls .stage/knobs-wheels/*.whl >/dev/null 2>&1; then
  mkdir -p /tmp/site
  python3 -m pip install -q --no-deps --no-index --target /tmp/site .stage/knobs-wheels/*.whl 2>&1 | grep -v -i warning
  case ":${PYTHONPATH:-}:" in *:/tmp/site:*) ;; *) export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH};; esac
fi
python3 -c "import clang.cindex, ziglang" 2>/dev/null && echo "libclang: importable" || echo "libclang: not importable"
if [ -n "${HOME_FROM:-}" ] && [ ! -d "$OUT/home" ]; then  # an earlier run's user folder: its later steps go on
  cp -r "$HOME_FROM" "$OUT/home" && echo "user folder from $HOME_FROM"
fi
export ASTRA_SGLANG_HOME=$OUT/home ASTRA_TUNER_MAX_CONFIGS=${CONFIGS:-5} ASTRA_TUNER_FINAL_TIMEOUT_S=${FINAL_S:-60}
STEPS=${STEPS:-"ops record optimize engage"}
FIX=tests/fixtures/onboard
PORT=${PORT:-30177}
SERVER=(--model-path /tmp/model --load-format dummy --attention-backend triton --sampling-backend pytorch
        --grammar-backend none --mem-fraction-static 0.5 --cuda-graph-max-bs 8 --host 127.0.0.1 --port "$PORT")
ASTRA=(python3 -m astra_sglang.cli)  # an array, not a function: `timeout` runs it
echo "| step | exit | command | last line |" > "$OUT/summary.md"
echo "|---|---|---|---|" >> "$OUT/summary.md"

run() {  # run SECONDS NAME CMD...: the command's output to OUT/NAME.txt, its tail here, a row of summary.md
  local limit=$1 name=$2; shift 2
  echo "== $name at $(elapsed) s: $*"
  timeout -k 10 "$limit" "$@" > "$OUT/$name.txt" 2>&1
  local rc=$?
  tail -n "${TAIL:-12}" "$OUT/$name.txt"
  echo "| $name | $rc | \`${*#python3 -m astra_sglang.cli }\` | $(tail -n 1 "$OUT/$name.txt" | tr '|' '/' | cut -c1-160) |" \
    >> "$OUT/summary.md"
  return $rc
}
spec_of() { sed -n 's#^wrote .*/specs/\(.*\)\.toml and .*#\1#p' "$OUT/$1.txt"; }

onboard() {  # onboard NAME ENTRY CALLS [onboard args]: the first command a user runs
  local name=$1 entry=$2 calls=$3; shift 3
  run 240 "onboard-$name" "${ASTRA[@]}" onboard "$entry" --shapes "$calls" "$@"
}
bench_of() {  # bench_of NAME: the second, on the spec the onboard of NAME wrote
  local spec; spec=$(spec_of "onboard-$1")
  [ -n "$spec" ] || { echo "bench-$1: skipped, onboard-$1 wrote no spec"; return 1; }
  run 150 "bench-$1" "${ASTRA[@]}" bench "$spec" --out "$OUT/$spec.bench.jsonl"
}
onboard_and_bench() {  # onboard_and_bench NAME ENTRY CALLS [onboard args]: the two commands a user runs
  onboard "$@" && bench_of "$1"
}

server() {  # server NAME LAUNCH-ARGS...: launch in the background, a short load once healthy, then stop it
  local name=$1; shift
  echo "== server $name at $(elapsed) s"
  setsid "${ASTRA[@]}" launch "$@" -- "${SERVER[@]}" > "$OUT/server-$name.txt" 2>&1 &
  local pid=$! ok=0
  for _ in $(seq 1 120); do
    curl -sf "http://127.0.0.1:$PORT/health" > /dev/null && { ok=1; break; }
    kill -0 "$pid" 2>/dev/null || break
    sleep 2
  done
  if [ "$ok" = 1 ]; then
    echo "healthy at $(elapsed) s"
    for words in 4 40 400; do  # prompts of several lengths, eight at a time: prefill and decode at batch 1-8
      local load=()
      for _ in $(seq 1 8); do
        curl -s --max-time 60 "http://127.0.0.1:$PORT/generate" -H 'Content-Type: application/json' \
          -d "{\"text\": \"$(printf 'the quick brown fox %.0s' $(seq 1 "$words"))\", \"sampling_params\": {\"max_new_tokens\": 24}}" \
          > /dev/null &
        load+=($!)
      done
      wait "${load[@]}"
    done
  else
    echo "server $name did not become healthy:"; tail -n 20 "$OUT/server-$name.txt"
  fi
  kill -TERM -- -"$pid" 2>/dev/null; sleep 5; kill -KILL -- -"$pid" 2>/dev/null
  echo "| server-$name | $((1 - ok)) | \`launch $*\` | healthy: $ok |" >> "$OUT/summary.md"
}

record_server() {  # SGLang under `launch --record-calls`, a short load: OUT/calls.json
  mkdir -p "$OUT/no-patches"
  server record --patches "$OUT/no-patches" --record-calls flashinfer.norm:rmsnorm --record-out "$OUT/calls.json" \
    --stats-dir "$OUT/record-stats" --mechanism import-hook
  echo "recorded $(python3 -c "import json,sys; print(len(json.load(open(sys.argv[1]))))" "$OUT/calls.json" 2>&1) calls"
}

case " $STEPS " in *" ops "*)
  # The five onboards at once (each one's first GPU run checks dtypes and tolerances, untimed: 40-100 s apiece on
  # an H200, mostly imports and JIT builds; the record step's server starts beside them), then each bench alone on
  # the GPU, as its figures are timed.
  pids=()
  case " $STEPS " in *" record "*) record_server & pids+=($!); RECORDED=1 ;; esac  # its start beside the onboards
  TAIL=0 onboard layernorm flashinfer.norm:layernorm "$FIX/layernorm.calls.json" & pids+=($!)
  TAIL=0 onboard relu2 sglang.srt.layers.activation:relu2 "$FIX/relu2.calls.json" & pids+=($!)
  TAIL=0 onboard top_k_renorm_probs flashinfer.sampling:top_k_renorm_probs "$FIX/top_k_renorm_probs.calls.json" &
  pids+=($!)
  TAIL=0 onboard per_token_quant sgl_kernel:sgl_per_token_quant_fp8 "$FIX/sgl_per_token_quant_fp8.calls.json" &
  pids+=($!)
  TAIL=0 onboard rope flashinfer.rope:apply_rope_pos_ids_inplace "$FIX/apply_rope_pos_ids_inplace.calls.json" \
    --model llama-3-8b & pids+=($!)
  wait "${pids[@]}"  # these alone: a bare wait would also wait for the log's tee, which ends only with the script
  for name in layernorm relu2 top_k_renorm_probs per_token_quant rope; do
    tail -n 8 "$OUT/onboard-$name.txt"
    bench_of "$name"
  done
esac

case " $STEPS " in *" record "*)
  [ -n "${RECORDED:-}" ] || record_server
  onboard_and_bench fi_rmsnorm flashinfer.norm:rmsnorm "$OUT/calls.json" --name fi_rmsnorm
esac

case " $STEPS " in *" optimize "*)
  if grep -q '^\[sources\.' "$ASTRA_SGLANG_HOME/specs/fi_rmsnorm.toml" 2>/dev/null; then
    run 300 optimize "${ASTRA[@]}" optimize fi_rmsnorm --rounds "${ROUNDS:-1}" --out "$OUT/optimize-run"
  else  # no extraction here (libclang): the tuner starts from a kernel of the same arguments
    run 300 optimize "${ASTRA[@]}" optimize fi_rmsnorm --tuner --from patches/rmsnorm/kernel.cu --rounds "${ROUNDS:-1}" \
      --out "$OUT/optimize-run"
  fi
  run 30 patch-list "${ASTRA[@]}" patch list --patches "$ASTRA_SGLANG_HOME/patches"
esac

case " $STEPS " in *" engage "*)
  if [ -f "$ASTRA_SGLANG_HOME/patches/fi_rmsnorm/manifest.json" ]; then
    server engage --patches "$ASTRA_SGLANG_HOME/patches" --stats-dir "$OUT/engage-stats" --mechanism import-hook
    run 30 report "${ASTRA[@]}" report --stats-dir "$OUT/engage-stats"
  else
    echo "engage: no patch for fi_rmsnorm in $ASTRA_SGLANG_HOME/patches (the optimize step wrote none)"
  fi
esac

echo "== done at $(elapsed) s"
cat "$OUT/summary.md"
