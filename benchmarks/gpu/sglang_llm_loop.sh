#!/usr/bin/env bash
# The agent loop against SGLang's own OpenAI-compatible server (one command, about 5 minutes): the runtime kit's
# 8-layer Llama-3-8B-shaped model with dummy weights and a plain word-level tokenizer (no chat template: SGLang
# answers 400 on chat, the client switches to /v1/completions with its own prompt format; 8192-token context:
# the client lowers its token cap to fit). The answers are noise, so no candidate parses: what is checked is
# that every round runs, every call is logged with its cost, and nothing stops the loop.
# Usage (repo root, GPU machine, runtime kit carried in .stage): bash benchmarks/gpu/sglang_llm_loop.sh [OUTDIR]
# env: PORT (30000), ROUNDS (2). OUTDIR (default $OUT, else /tmp/sglang-loop) gets server.log, optimize.log,
# llm.log, report.md, result.txt; prints result.txt last.
set -u
OUTDIR=${1:-${OUT:-/tmp/sglang-loop}}; mkdir -p "$OUTDIR"
source benchmarks/gpu/setup.sh
PORT=${PORT:-30000}; ROUNDS=${ROUNDS:-2}; RUN=$(mktemp -d /tmp/sglang-loop.XXXX)/run
setsid python3 -m sglang.launch_server --model-path /tmp/model --load-format dummy --attention-backend triton \
  --sampling-backend pytorch --grammar-backend none --host 127.0.0.1 --port "$PORT" --mem-fraction-static 0.5 \
  > "$OUTDIR/server.log" 2>&1 &
SPID=$!
trap 'kill -TERM -- -$SPID 2>/dev/null; sleep 3; kill -KILL -- -$SPID 2>/dev/null' EXIT INT TERM
for i in $(seq 1 120); do
  curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break
  kill -0 $SPID 2>/dev/null || { echo "server died"; tail -30 "$OUTDIR/server.log"; exit 1; }
  sleep 2
done
echo "server healthy after ~$((i * 2)) s"
MODEL=$(curl -s "http://127.0.0.1:$PORT/v1/models" | python3 -c "import json, sys; print(json.load(sys.stdin)['data'][0]['id'])")
timeout 360 astra-sglang optimize silu_and_mul --llm "$MODEL" --base-url "http://127.0.0.1:$PORT/v1" --api-key none \
  --rounds "$ROUNDS" --population 2 --plans 1 --repairs 1 --shapes quick --out "$RUN" > "$OUTDIR/optimize.log" 2>&1
rc=$?
cp "$RUN/llm.log" "$RUN/report.md" "$OUTDIR/" 2>/dev/null
python3 - "$RUN" "$rc" > "$OUTDIR/result.txt" <<'PY'
import json, sys
from collections import Counter
run, rc = sys.argv[1], int(sys.argv[2])
rows = [json.loads(x) for x in open(f"{run}/rounds.jsonl")]
rounds = sorted({r["round"] for r in rows if r["role"] == "round"})
cands = Counter(r["payload"]["status"] for r in rows if r["role"] == "cand")
calls = open(f"{run}/llm.log").read().splitlines()
stops = [r["summary"] for r in rows if r["role"] == "stop"]
print(f"optimize exit code {rc}; rounds logged {rounds}; candidates {dict(cands)}; LLM calls {len(calls)} "
      f"({sum(' completions' in c for c in calls)} on /v1/completions); stop: {stops or 'none'}")
PY
cat "$OUTDIR/result.txt"
