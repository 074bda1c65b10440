#!/usr/bin/env bash
# The agent loop against SGLang's own OpenAI-compatible server, as one job of two ops (silu_and_mul and rmsnorm
# sharing the GPU pool), for 10+ minutes of rounds across two calls of this script, each call within CALL_S
# seconds (530: under 9 minutes) with the server's start included. The LLM is the runtime kit's 8-layer
# Llama-3-8B-shaped model with dummy weights and a plain word-level tokenizer: the real protocol (no chat template,
# so SGLang answers 400 on chat and the client switches to /v1/completions with its own prompt format; an
# 8192-token context, so the client lowers its token cap to fit), garbage text. No candidate parses, so what is
# checked is that the rounds go on for their time with a cost line per call (the model is priced with --price,
# the run has --budget-usd), that both ops' runs end cleanly and resume, and that nothing crashes. The start
# kernels are really built, checked, timed and profiled with Nsight Compute (its outputs come back as
# ncu-details.csv / ncu-source.csv).
#
# Each call gives its rounds what is left of CALL_S after the set-up and the server's start, less PREP_S (part 1:
# the baselines' builds, evaluations and Nsight Compute profiles, 200) or RESUME_S (later calls: the start-up,
# 60), each also covering the model requests in flight at the rounds' deadline (they finish; a dummy model
# answers to its token cap), less TAIL_S (15: the outputs), as the settings file's deadline_s; `timeout` stops
# optimize TAIL_S before CALL_S whatever happens. A later call resumes the job with its own deadline (--resume
# with --config).
#
# Usage (repo root, GPU machine, runtime kit carried in .stage; the second call on the same warm machine, so that
# the job folder work/sglang-llm-loop/ is still there; the server, started with setsid, is reused when it is up):
#   bash benchmarks/gpu/sglang_llm_loop.sh OUTDIR     # part 1: starts the server and the job
#   bash benchmarks/gpu/sglang_llm_loop.sh OUTDIR     # part 2: resumes the job, stops the server (PARTS=2)
# env: PORT (30000), CALL_S, PREP_S, RESUME_S, TAIL_S, PARTS (the call that stops the server, 2), FRESH=1 (start
# the job over), SETUP (the set-up script sourced first), ASTRA (the command, astra-sglang), JOB (the job folder),
# MIN_ROUNDS_S (30: a call with less time left for rounds stops at once).
# OUTDIR (default $OUT, else /tmp/sglang-loop) gets result.txt (printed last: minutes of rounds per op and a
# verdict, benchmarks/llm_loop_result.py), optimize.log, server.log, job.md, <op>-llm.log and the first op's
# ncu-details.csv / ncu-source.csv (ncu's own outputs for the baseline).
set -u
START=$(date +%s)
OUTDIR=${1:-${OUT:-/tmp/sglang-loop}}; mkdir -p "$OUTDIR"
source "${SETUP:-benchmarks/gpu/setup.sh}"
PORT=${PORT:-30000}; CALL_S=${CALL_S:-530}; PREP_S=${PREP_S:-200}; RESUME_S=${RESUME_S:-60}; TAIL_S=${TAIL_S:-15}
PARTS=${PARTS:-2}; JOB=${JOB:-$PWD/work/sglang-llm-loop}; URL="http://127.0.0.1:$PORT"
read -r -a ASTRA <<< "${ASTRA:-astra-sglang}"
[ "${FRESH:-0}" = 1 ] && rm -rf "$JOB"
mkdir -p "$JOB"
PART=$(( $(cat "$JOB/parts.txt" 2>/dev/null | wc -l) + 1 ))
RESUME=0; [ -f "$JOB/silu_and_mul/config.json" ] && RESUME=1
if curl -sf "$URL/health" >/dev/null; then
  echo "server already up (part $PART)"
else
  setsid python3 -m sglang.launch_server --model-path /tmp/model --load-format dummy --attention-backend triton \
    --sampling-backend pytorch --grammar-backend none --enable-cache-report --host 127.0.0.1 --port "$PORT" \
    --mem-fraction-static 0.5 \
    >> "$JOB/server.log" 2>&1 < /dev/null &
  echo $! > "$JOB/server.pid"
  for i in $(seq 1 90); do
    curl -sf "$URL/health" >/dev/null && break
    kill -0 "$(cat "$JOB/server.pid")" 2>/dev/null || { echo "server died"; tail -30 "$JOB/server.log"; exit 1; }
    [ "$i" = 90 ] && { echo "server not healthy after 180 s"; tail -30 "$JOB/server.log"; exit 1; }
    sleep 2
  done
  echo "server healthy after $(( $(date +%s) - START )) s of this call (part $PART)"
fi
MODEL=$(curl -s "$URL/v1/models" | python3 -c "import json, sys; print(json.load(sys.stdin)['data'][0]['id'])")
LEFT=$(( CALL_S - ($(date +%s) - START) ))
ROUNDS_S=$(( LEFT - TAIL_S - (RESUME == 1 ? RESUME_S : PREP_S) ))
[ "$ROUNDS_S" -lt "${MIN_ROUNDS_S:-30}" ] && { echo "only $LEFT s left of this call: not enough for rounds"; exit 1; }
echo "part $PART: ${ROUNDS_S} s of rounds, optimize stopped $((LEFT - TAIL_S)) s from now at the latest"
# no plateau stop (no garbage answer ever improves on the start kernel); this call's part of the rounds: ROUNDS_S
printf 'plateau = 0\ndeadline_s = %s\nrounds = 500\nmax_rounds = 500\n' "$ROUNDS_S" > "$JOB/settings-$PART.toml"
COMMON=(--llm "$MODEL" --base-url "$URL/v1" --api-key none --budget-usd 20 --price "$MODEL=0.10/0.40"
        --config "$JOB/settings-$PART.toml" --patches-dir "$JOB/patches")
began=$(date +%s)
if [ "$RESUME" = 0 ]; then
  timeout -k 10 $((LEFT - TAIL_S)) "${ASTRA[@]}" optimize silu_and_mul rmsnorm "${COMMON[@]}" --shapes quick \
    --out "$JOB" > "$JOB/optimize-$PART.log" 2>&1
else
  timeout -k 10 $((LEFT - TAIL_S)) "${ASTRA[@]}" optimize --resume "$JOB" "${COMMON[@]}" \
    > "$JOB/optimize-$PART.log" 2>&1
fi
rc=$?
echo "$PART $began $(date +%s) $rc" >> "$JOB/parts.txt"
if [ "$PART" -ge "$PARTS" ] && [ -f "$JOB/server.pid" ]; then
  kill -TERM -- -"$(cat "$JOB/server.pid")" 2>/dev/null; sleep 3; kill -KILL -- -"$(cat "$JOB/server.pid")" 2>/dev/null
  rm -f "$JOB/server.pid"
fi
cat "$JOB"/optimize-*.log > "$OUTDIR/optimize.log"; tail -200 "$JOB/server.log" > "$OUTDIR/server.log" 2>/dev/null
cp "$JOB/job.md" "$OUTDIR/" 2>/dev/null
for op in silu_and_mul rmsnorm; do cp "$JOB/$op/llm.log" "$OUTDIR/$op-llm.log" 2>/dev/null; done
for f in ncu-details.csv ncu-source.csv; do cp "$JOB/silu_and_mul/profiles/r00/$f" "$OUTDIR/" 2>/dev/null; done
python3 benchmarks/llm_loop_result.py "$JOB" > "$OUTDIR/result.txt"
cat "$OUTDIR/result.txt"
