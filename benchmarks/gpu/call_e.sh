#!/usr/bin/env bash
# GPU calls of the second session, serving (issue: patch-back). Steps, in the order given:
#   ab    A/B, RUNS (3) runs per arm, REPEATS (1) benchmarks per server start, NUM_PROMPTS (512) prompts, flashinfer attention + shared-prefix prompts (cached prefixes: the backend
#         merges partial states with flashinfer.cascade.merge_state, so every shipped op is reachable).
#         PAIRED=1: `ab --paired` instead (both servers up at once, RUNS rounds AB BA AB ...; each server gets
#         --mem-fraction-static 0.4 instead of 0.8 so two fit); MAX_TOTAL_TOKENS (unset) adds --max-total-tokens
#         to both, so their KV pools are equal (ab.md prints both pool sizes); B_FIRST=1 starts the patched server first
#         DEFER_ALL=1: B's manifests defer every call to SGLang's op (the patch layer with SGLang's kernels: a control).
#         CONCURRENCY (64) and OUTPUT_LEN (256): e.g. 1 and 8 time one request's prefill with no queueing.
#         DATASET=random-ids BACKEND=triton: independent prompts on the triton backend (decode-heavy; no cascade
#         merge, so merge_state is not reached; the benchmark client starts in seconds, not the ~30 s the
#         shared-prefix dataset's generation took per benchmark in session 9)
#   live  one patched server with a WRONG silu_and_mul (tests/fixtures/cheats/low_precision.cu) and
#         --verify-rate 0.05: the shadow check must disable it in every process that sees a mismatch while
#         the server keeps serving; then the agent loop against this server's own OpenAI API (dummy
#         weights: garbage text), which must end cleanly
# Usage (repo root, GPU machine; carry .stage): bash benchmarks/gpu/call_e.sh OUTDIR STEP...
set -u
OUTDIR=${1:?OUTDIR}; shift; mkdir -p "$OUTDIR"
source benchmarks/gpu/setup.sh > "$OUTDIR/env.txt"; cat "$OUTDIR/env.txt"
SERVER_ARGS="--sampling-backend pytorch --grammar-backend none --cuda-graph-max-bs-decode 64 --mem-fraction-static 0.8"
t0=$(date +%s)
for step in "$@"; do
  echo "=== $step (t=$(( $(date +%s) - t0 ))s)"
  case $step in
    ab)
      rm -rf /tmp/abp && cp -r patches /tmp/abp
      # FA3 (merge_state_v2's call site) is stripped from the runtime kit: that target cannot import there.
      astra-sglang patch disable merge_attn_states_lse --patches /tmp/abp
      astra-sglang patch enable merge_state --patches /tmp/abp
      if [ "${DEFER_ALL:-0}" = 1 ]; then  # control: B runs SGLang's kernels through the patch layer (A/A + dispatch)
        python3 -c "from astra_sglang.patching.manifest import PatchManifest as M, Defer; import sys
for op in sys.argv[1:]:
    m = M.load(f'/tmp/abp/{op}'); m.defer = Defer(min_bytes=1, evidence='A/A control: every call deferred'); m.save(f'/tmp/abp/{op}')" \
          fused_add_rmsnorm rmsnorm silu_and_mul merge_state
      fi
      AB_MODE="" AB_ARGS=$SERVER_ARGS AB_LOG=server-B-1.log AB_TAIL=22  # SERVER_ARGS stays as it is for `live`
      if [ "${PAIRED:-0}" = 1 ]; then
        AB_MODE="--paired${B_FIRST:+ --b-first}" AB_LOG="server-A-paired.log server-B-paired.log server-info-A.json server-info-B.json" AB_TAIL=$(( 2 * ${RUNS:-3} + 16 ))
        AB_ARGS="${SERVER_ARGS/--mem-fraction-static 0.8/--mem-fraction-static 0.4}${MAX_TOTAL_TOKENS:+ --max-total-tokens $MAX_TOTAL_TOKENS}"
      fi
      timeout ${AB_TIMEOUT:-540} astra-sglang ab --model-path /tmp/model --load-format dummy --runs ${RUNS:-3} $AB_MODE \
        --patches /tmp/abp --dataset ${DATASET:-shared-prefix} --num-prompts ${NUM_PROMPTS:-512} --groups 16 --prefix-len 2048 --repeats ${REPEATS:-1} \
        --input-len 256 --output-len ${OUTPUT_LEN:-256} --concurrency ${CONCURRENCY:-64} --out /tmp/ab -- --attention-backend ${BACKEND:-flashinfer} \
        $AB_ARGS 2>&1 | grep -v -i warn | tail -$AB_TAIL
      cp /tmp/ab/ab.md /tmp/ab/ab.jsonl /tmp/ab/ab.png "$OUTDIR/" 2>/dev/null
      tar -czf "$OUTDIR/ab-stats.tgz" -C /tmp/ab stats $AB_LOG 2>/dev/null ;;
    live)
      rm -rf /tmp/bad /tmp/live-stats && cp -r patches /tmp/bad
      cp tests/fixtures/cheats/low_precision.cu /tmp/bad/silu_and_mul/kernel.cu
      astra-sglang patch disable merge_attn_states_lse --patches /tmp/bad
      setsid astra-sglang launch --patches /tmp/bad --verify-rate 0.05 --stats-dir /tmp/live-stats -- \
        --model-path /tmp/model --load-format dummy --attention-backend triton --host 127.0.0.1 --port 30000 \
        $SERVER_ARGS > /tmp/live-server.log 2>&1 &
      SPID=$!
      for i in $(seq 1 150); do curl -sf http://127.0.0.1:30000/health > /dev/null && break; sleep 2; done
      echo "healthy after ~$((i * 2)) s"
      ok=0; for k in $(seq 1 16); do
        curl -sf http://127.0.0.1:30000/generate -H 'Content-Type: application/json' \
          -d "{\"text\": \"t$k t7 t9 t11\", \"sampling_params\": {\"max_new_tokens\": 32, \"temperature\": 0}}" \
          > /dev/null && ok=$((ok + 1)); done
      echo "served $ok/16 requests with the wrong patch installed"
      timeout ${LLM_TIMEOUT:-240} astra-sglang optimize silu_and_mul --rounds ${LLM_ROUNDS:-2} --llm /tmp/model --base-url http://127.0.0.1:30000/v1 \
        --api-key none --max-tokens 60000 --out /tmp/llm-sglang 2>&1 | tail -12
      curl -sf http://127.0.0.1:30000/health > /dev/null && echo "server still healthy after the agent loop"
      sleep 11  # one stats interval
      astra-sglang report --stats-dir /tmp/live-stats 2>&1 | tail -14
      grep -i "disabled in this process" /tmp/live-server.log | head -3
      kill -TERM -- -$SPID 2>/dev/null; sleep 5; kill -KILL -- -$SPID 2>/dev/null
      tar -czf "$OUTDIR/live.tgz" -C /tmp live-stats live-server.log llm-sglang 2>/dev/null ;;
    *) echo "unknown step $step" ;;
  esac
done
echo "=== done (t=$(( $(date +%s) - t0 ))s)"
