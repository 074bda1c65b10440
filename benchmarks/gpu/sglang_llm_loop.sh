#!/usr/bin/env bash
# The agent loop against SGLang's own OpenAI-compatible server, as one job of two ops (silu_and_mul and rmsnorm
# sharing the GPU pool), for 10+ minutes of rounds across two calls of this script (each under the 10 minutes a
# call may take, the server's start included). The LLM is the runtime kit's 8-layer Llama-3-8B-shaped model with
# dummy weights and a plain word-level tokenizer: the real protocol (no chat template, so SGLang answers 400 on
# chat and the client switches to /v1/completions with its own prompt format; an 8192-token context, so the
# client lowers its token cap to fit), garbage text. No candidate parses, so what is checked is that the rounds
# go on for their time with a cost line per call (the model is priced with --price, the run has --budget-usd),
# that both ops' runs end cleanly and resume, and that nothing crashes. The start kernels are really built,
# checked, timed and profiled with Nsight Compute (its outputs come back as ncu-details.csv / ncu-source.csv).
#
# Usage (repo root, GPU machine, runtime kit carried in .stage; the second call within 30 s of the first, on the
# same warm machine: the job folder work/sglang-llm-loop/ and the server, started with setsid, are still there):
#   bash benchmarks/gpu/sglang_llm_loop.sh OUTDIR     # call 1: starts the server and the job (RUN_S of rounds)
#   bash benchmarks/gpu/sglang_llm_loop.sh OUTDIR     # call 2: reuses the server, resumes the job, stops the server
# env: PORT (30000), RUN_S (seconds of rounds a call, 330: about 9 minutes for call 1 with the server start, the
# baselines and their Nsight Compute profiles, 6 for call 2), FRESH=1 (start the job over). OUTDIR (default $OUT,
# else /tmp/sglang-loop) gets result.txt (printed last), optimize.log, server.log, job.md, <op>-llm.log and the
# first op's ncu-details.csv / ncu-source.csv (ncu's own outputs for the baseline).
set -u
OUTDIR=${1:-${OUT:-/tmp/sglang-loop}}; mkdir -p "$OUTDIR"
source benchmarks/gpu/setup.sh
PORT=${PORT:-30000}; RUN_S=${RUN_S:-330}; JOB=$PWD/work/sglang-llm-loop; URL="http://127.0.0.1:$PORT"
[ "${FRESH:-0}" = 1 ] && rm -rf "$JOB"
PART=1; [ -f "$JOB/silu_and_mul/config.json" ] && PART=2
mkdir -p "$JOB"
if curl -sf "$URL/health" >/dev/null; then
  echo "server already up (call $PART)"
else
  setsid python3 -m sglang.launch_server --model-path /tmp/model --load-format dummy --attention-backend triton \
    --sampling-backend pytorch --grammar-backend none --host 127.0.0.1 --port "$PORT" --mem-fraction-static 0.5 \
    >> "$JOB/server.log" 2>&1 < /dev/null &
  echo $! > "$JOB/server.pid"
  for i in $(seq 1 120); do
    curl -sf "$URL/health" >/dev/null && break
    kill -0 "$(cat "$JOB/server.pid")" 2>/dev/null || { echo "server died"; tail -30 "$JOB/server.log"; exit 1; }
    sleep 2
  done
  echo "server healthy after ~$((i * 2)) s (call $PART)"
fi
MODEL=$(curl -s "$URL/v1/models" | python3 -c "import json, sys; print(json.load(sys.stdin)['data'][0]['id'])")
# no plateau stop (no garbage answer ever improves on the start kernel); each call's part of the run gets RUN_S
printf 'plateau = 0\ndeadline_s = %s\nrounds = 500\nmax_rounds = 500\n' "$RUN_S" > "$JOB/settings.toml"
COMMON=(--llm "$MODEL" --base-url "$URL/v1" --api-key none --budget-usd 20 --price "$MODEL=0.10/0.40")
began=$(date +%s)
if [ "$PART" = 1 ]; then
  timeout $((RUN_S + 150)) astra-sglang optimize silu_and_mul rmsnorm "${COMMON[@]}" --config "$JOB/settings.toml" \
    --shapes quick --out "$JOB" --patches-dir "$JOB/patches" > "$JOB/optimize-$PART.log" 2>&1
else
  timeout $((RUN_S + 150)) astra-sglang optimize --resume "$JOB" "${COMMON[@]}" --patches-dir "$JOB/patches" \
    > "$JOB/optimize-$PART.log" 2>&1
fi
rc=$?
echo "$PART $began $(date +%s) $rc" >> "$JOB/parts.txt"
if [ "$PART" = 2 ] || [ "${STOP_SERVER:-0}" = 1 ]; then
  kill -TERM -- -"$(cat "$JOB/server.pid")" 2>/dev/null; sleep 3; kill -KILL -- -"$(cat "$JOB/server.pid")" 2>/dev/null
fi
cat "$JOB"/optimize-*.log > "$OUTDIR/optimize.log"; tail -200 "$JOB/server.log" > "$OUTDIR/server.log"
cp "$JOB/job.md" "$OUTDIR/" 2>/dev/null
for op in silu_and_mul rmsnorm; do cp "$JOB/$op/llm.log" "$OUTDIR/$op-llm.log" 2>/dev/null; done
for f in ncu-details.csv ncu-source.csv; do cp "$JOB/silu_and_mul/profiles/r00/$f" "$OUTDIR/" 2>/dev/null; done
python3 - "$JOB" > "$OUTDIR/result.txt" <<'PY'
import json, sys
from collections import Counter
from pathlib import Path
job = Path(sys.argv[1])
parts = [line.split() for line in (job / "parts.txt").read_text().splitlines()]
print("calls: " + "; ".join(f"part {p} {int(e) - int(b)} s, exit code {rc}" for p, b, e, rc in parts)
      + f"; {sum(int(e) - int(b) for _, b, e, _ in parts) / 60:.1f} minutes of optimize in all")
for op in ("silu_and_mul", "rmsnorm"):
    rows = [json.loads(x) for x in (job / op / "rounds.jsonl").read_text().splitlines() if x.strip()]
    plans = sorted({r["round"] for r in rows if r["role"] == "plan"})
    cands = Counter(r["payload"]["status"] for r in rows if r["role"] == "cand")
    calls = (job / op / "llm.log").read_text().splitlines()
    priced = sum("$0.00000;" not in c and " $" in c for c in calls)
    stops = [r["summary"] for r in rows if r["role"] == "stop"]
    print(f"{op}: rounds planned {len(plans)} (last {plans[-1] if plans else '-'}); candidates {dict(cands)}; "
          f"LLM calls {len(calls)} ({sum(' completions' in c for c in calls)} on /v1/completions, {priced} with a "
          f"cost); stops: {stops or 'none'}")
logs = "".join(p.read_text() for p in sorted(job.glob("optimize-*.log")))
print(f"tracebacks in optimize's output: {logs.count('Traceback')}")
PY
cat "$OUTDIR/result.txt"
