#!/usr/bin/env bash
# The serving method's controls on a two-GPU machine (nvidia-h100-x2), in calls of at most 9 minutes, resumable.
# Stages (STAGES, default "aa wrong"):
#   aa      The A/A control in the crossover design: two unpatched servers, one per GPU, restarted together and
#           swapped between GPUs every period; PERIODS periods (default 6) of ROUNDS timed rounds (default 3), each
#           start first warmed by one untimed round of the same client; the client of ab_common.sh (PROMPTS=1024
#           prompts, IN=128 in / OUT_LEN=256 out, CONC=32 concurrent, fixed lengths, seed 1: timed windows of about
#           12 s or more), one long-lived client process per arm; then every server's top logprobs on fixed
#           prompts. No period starts that would end past the stage's share of DEADLINE (default 500 s); the next
#           call with RUNS=<a folder holding the earlier OUT's aa/> goes on where it stopped.
#   wrong   Parity against a deliberately wrong patch (tests/fixtures/wrong-patches: fused_add_rmsnorm x 1.01):
#           one period, no rounds, A unpatched on one GPU and B wrong on the other, judged against the A/A's own
#           logprob differences. Its report must say parity FAIL; the script's last lines say whether it did.
#   aa1     The A/A control in the one-GPU design (restarts): two unpatched arms started one at a time on GPU AA1_GPU
#           (default 0) in the order A B B A A B ..., STARTS starts an arm (default 3, at least 3), each warmed by one
#           untimed round, then ROUNDS timed rounds, the same client; resumable like aa (RUNS=<folder holding aa1/>).
#           A start takes one server's start (~50 s warm) plus its rounds, so 6 starts take two calls.
#   offset  Why the second of two servers on one GPU ran slower (benchmarks/aa_offset.py): both on GPU 0, their
#           settings compared, each one's decode steps profiled (GPU time vs host wall). ~3 minutes.
# The model: the kit's 8-layer Llama-3-8B shape with random weights of a trained model's scale (make_weights.py),
# so that logprobs carry numerics (dummy weights make every output the same alternation).
# Usage (repo root, GPU machine with two GPUs, .stage carried): OUT=/path [RUNS=work/ab-runs] bash benchmarks/gpu/ab_design.sh
# Writes OUT/aa/ and OUT/wrong/ (each: ab.md, summary.json, ab.jsonl, starts.jsonl, parity.jsonl, plan.json,
# settings-diff-p*.json, server and benchmark logs), OUT/offset/ (offset.json, settings-diff.json), console.txt.
# Time, measured on 4x NVIDIA H200 (2026-11-27, commit d5b82c5, STAGES=aa under host_split.sh beside the bar job,
# benchmarks/results/2026-11-27-h200/serving/): setup and weights 38 s on a fresh machine, 26-28 s on a warm one; a
# fresh machine's first period starts its servers one after the other (ab_common.sh says why), 127 s then 87 s, and
# took 331 s; later periods start both at once (the first healthy after 51-75 s, the second 1-7 s later) and took
# 147-195 s with rounds of 16.5-28.9 s (the host's load moved the rate between 9.6k and 15.1k tok/s). So calls of
# DEADLINE=510 ran 1 period (fresh machine), then 2 and 2 (warm): the 5 periods the A/A rule needs (>= 8 rounds and
# >= 3 degrees of freedom, design_stats.AA_MIN_DF) take three calls, each going on from the last (RUNS=). The wrong
# stage took 81 s more (its patch build 12 s of it; commit 45b7284). An H100 runs slower steps, so longer rounds and
# periods; the stop rule goes by the periods it has timed.
source benchmarks/gpu/ab_common.sh
DEADLINE=${DEADLINE:-500}
STAGES=${STAGES:-aa wrong}
WRONG_RESERVE=${WRONG_RESERVE:-110}

for stage in $STAGES; do
  case $stage in
  aa)
    resume_from aa
    reserve=0; [[ " $STAGES " == *" wrong "* ]] && reserve=$WRONG_RESERVE
    left=$(( DEADLINE - $(elapsed) - reserve ))
    echo "== aa: crossover A/A, up to ${PERIODS:-6} periods, ${left} s"
    astra-sglang ab --model-path "$MODEL" --design crossover --gpus 0,1 --control --runs "${PERIODS:-6}" \
      --rounds "$ROUNDS" --port "$PORT" --stop-after "$left" --health-timeout 300 "${CLIENT[@]}" \
      $(stagger_opts "$MODEL") --out "$OUT/aa" -- "${SERVER_ARGS[@]}"
    echo "== aa: exit $? at $(elapsed) s"; mark_started "$MODEL" "$OUT/aa"; report_line "$OUT/aa" ;;
  aa1)
    resume_from aa1
    left=$(( DEADLINE - $(elapsed) ))
    echo "== aa1: restarts A/A on GPU ${AA1_GPU:-0}, ${STARTS:-3} starts an arm, ${left} s"
    astra-sglang ab --model-path "$MODEL" --design restarts --gpus "${AA1_GPU:-0}" --control --runs "${STARTS:-3}" \
      --rounds "$ROUNDS" --port "$PORT" --stop-after "$left" --health-timeout 300 "${CLIENT[@]}" \
      --out "$OUT/aa1" -- "${SERVER_ARGS[@]}"
    echo "== aa1: exit $? at $(elapsed) s"; mark_started "$MODEL" "$OUT/aa1"; report_line "$OUT/aa1" ;;
  wrong)
    [ -f "$OUT/aa/parity.jsonl" ] || { echo "== wrong: skipped, no A/A probes in $OUT/aa"; continue; }
    echo "== wrong: parity against tests/fixtures/wrong-patches"
    astra-sglang ab --model-path "$MODEL" --design crossover --gpus 0,1 --runs 1 --rounds 0 --port "$PORT" \
      --patches tests/fixtures/wrong-patches --aa "$OUT/aa" $(stagger_opts "$MODEL") --health-timeout 300 \
      "${CLIENT[@]}" --out "$OUT/wrong" -- "${SERVER_ARGS[@]}"
    echo "== wrong: exit $? at $(elapsed) s"; report_line "$OUT/wrong"
    python3 -c "import json,sys; p=json.load(open('$OUT/wrong/summary.json'))['parity']; \
print('== wrong patch caught by parity' if p and not p['ok'] else '== WRONG PATCH NOT CAUGHT')" ;;
  offset)
    echo "== offset: two unpatched servers on GPU 0"
    timeout -k 20 "${OFFSET_TIMEOUT:-300}" python3 benchmarks/aa_offset.py "$OUT/offset" --model "$MODEL" --gpu 0 \
      --port $((PORT + 4)) -- "${SERVER_ARGS[@]}" --mem-fraction-static 0.4 --max-total-tokens 200000 --sleep-on-idle
    echo "== offset: exit $? at $(elapsed) s" ;;
  *) echo "unknown stage $stage" ;;
  esac
done
find "$OUT" -name "*.log" -size +2M -exec truncate -s 2M {} \;  # keep what comes back small
echo "== done at $(elapsed) s"
