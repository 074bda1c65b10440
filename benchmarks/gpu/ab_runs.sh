#!/usr/bin/env bash
# The serving A/Bs with the method of ab_design.sh (crossover on two GPUs by default; DESIGN=restarts on one GPU),
# in calls of at most 9 minutes, resumable (RUNS=<a folder holding an earlier OUT's stage folders>).
# Stages (STAGES, default "mixtral dense"; the dsv2lite ones only when named; each gets an equal share of DEADLINE,
# default 500 s):
#   mixtral  A Mixtral-shaped model (benchmarks/make_moe_model.py, dummy weights, SGLang's Triton MoE runner).
#            A: SGLang's best available fused-MoE config for this GPU; B: our tuning's configs for it, as a patch
#            over A's folder (benchmarks/moe_ab_configs.py; it refuses, in one line, a GPU B was not tuned on).
#            On an H100: Mixtral-8x7B's whole experts (N=14336), A SGLang's H200 file under the H100's name through
#            $SGLANG_MOE_CONFIG_DIR (it ships none for the H100), B what `tune fused_moe` chose there
#            (benchmarks/results/2026-11-25-h100/mixtral-tune), 4 layers, the A/A's client. On an H200: Mixtral-8x7B's
#            TP2 shard (preset mixtral-8x7b-tp2-experts, N=7168), A SGLang's own H200 file, B the file our two tiers
#            wrote against SGLang's whole-space tuner (batch 1 and 64 tuned: 1.044x and 1.025x SGLang's pick),
#            served one request at a time as dsv2lite is: at the A/A's 32 concurrent requests the decode calls
#            read key 32, where B's file holds SGLang's own pick. Mixtral-8x7B's 32 layers (MIX_LAYERS).
#   mixtral-aa  The mixtral stage's A/A: both arms A (--control), the same model, client and servers: on one GPU
#            (DESIGN=restarts) the licence its restarts A/Bs need (astra_sglang/serving/license.py), since the dense
#            model's restarts A/A failed (benchmarks/results/2026-11-28-h200/serving/).
#   dense    The kit's 8-layer Llama-3-8B shape with random weights (make_weights.py). A: unpatched; B: the shipped
#            patch set as `launch` serves it (merge_attn_states_lse off: the kit has no FA3).
#   dsv2lite DeepSeek-V2-Lite's routed experts in DeepSeek-V2-Lite's 26 MoE layers (DSV2_LAYERS; make_moe_model.py
#            deepseek-v2-lite-experts, dummy weights), decoded one request at a time (batch 1, where our tiers tuned
#            it). A: SGLang as shipped (no H200 file for E=64,N=1408: its default config); B: the file our two tiers
#            wrote on an H200 (benchmarks/results/2026-11-27-h200/moe-bar/ours-deepseek-v2-lite-1: batch 1 tuned,
#            1.104x the default by the strict evaluator, SGLang's picks at every other key). A is what SGLang
#            serves untuned. On an H200 only.
#   dsv2lite-tuned  dsv2lite's model, client and servers against the A a user who ran SGLang's own tuner would
#            serve: A the file its tuner writes at batch 1 and 64, its best at each (moe-bar/deepseek-v2-lite-1-64),
#            through $SGLANG_MOE_CONFIG_DIR; B ours at the same two keys only (moe-bar/ours-deepseek-v2-lite-1 and
#            -64), a patch over A's folder (benchmarks/moe_ab_configs.py --shape dsv2lite). Every other batch size
#            reads the nearest key in both arms; the arms differ at key 1 (ours 1.052x the tuner's best, strict),
#            not at 64 (the same config). Config folders in DSV2_CFG (default /tmp/ab-configs-<stage>), as the
#            mixtral stages' in MOE_CFG.
#   dsv2lite-aa  dsv2lite-tuned's A/A: both arms that A (--control), the same model, client and servers: its
#            floor and, on one GPU, its restarts licence, as mixtral-aa is the mixtral stage's.
# The one-request client of mixtral (on an H200) and the dsv2lite stages: MIX_PROMPTS (24) / DSV2_PROMPTS (48) prompts
# of 128 in / ONE_OUT (128) out at concurrency 1, seed 1, one warm-up request. Why the real layer counts: with 4 and 8
# layers (4x H200, 2026-11-28, commit 06933ed, JOBS="abruns01 abruns" ABRUNS01_STAGES=mixtral ABRUNS_STAGES=dsv2lite
# through host_split.sh) both models decoded at the same 1.49-1.92 ms a token, round to round, where their fused MoE
# calls take ~0.56 and ~0.54 ms a step (SGLang's config, the strict evaluator's times at batch 1: 140 and 67 us a call):
# the server's own per-step host work set the pace, and a kernel change cannot show in it. At 32 and 26 layers the MoE
# calls alone take ~4.5 and ~1.7 ms a step by those times, so the GPU sets it, and B's gain is the MoE share of the
# step times the kernel's (at most 1 - 1/1.044 = 4.2% and 1 - 1/1.104 = 9.4%; dsv2lite-tuned's, 1 - 1/1.052 = 4.9%).
# The mixtral stage's result (2x H200, 2026-11-28, benchmarks/results/2026-11-28-h200/serving/mixtral-ab): -1.80%
# ITL, B saving 2.95 us a layer, what SGLang's script timing gives the two configs, half the strict evaluator's gap. dense and the H100
# mixtral use the A/A's client and rounds (ab_common.sh: PROMPTS=1024, 128 in / 256 out, 32 concurrent, fixed lengths,
# seed 1; ROUNDS=3 after a full warm-up round; one long-lived client per arm), so the A/A's interval is the floor to
# read them against (the one-request stages share its rounds, not its client: their own floor is an A/A of their model,
# mixtral-aa and dsv2lite-aa); AA=<the A/A's run folder> makes it the parity reference of the stage whose model it
# served (dense); a stage of another model takes its own A across its starts, and its report says why.
# Time: a period as ab_design.sh's (measured there on 4x H200, 2026-11-27: 147-195 s with both starts at once, 331 s
# as a fresh machine's first), so a call runs 1 period on a fresh machine and 2 on a warm one; 5 periods (3 df) take
# three calls going on from each other (RUNS=). host_split.sh runs two stages at once (JOBS="abruns01 abruns":
# mixtral on GPUs 0,1, dsv2lite on 2,3), and AA=benchmarks/results/2026-11-27-h200/serving/aa, the committed A/A,
# is a parity reference that travels with the checkout. The 4- and 8-layer one-request runs above took 37-48 s a
# round at 96 prompts of 256 out, so ~400 s a period: hence the shorter client (each window ~20 and ~15 s at the
# step times above; ab's report flags any under 10 s).
# Usage (repo root, GPU machine, .stage carried): OUT=/path [RUNS=work/ab-runs] [AA=work/ab-runs/aa] bash benchmarks/gpu/ab_runs.sh
# Writes OUT/<stage>/ (ab.md, summary.json, rows, probes, logs), the config folders of the mixtral stages in
# OUT/moe-configs/ and of dsv2lite-tuned/-aa in OUT/moe-configs-<stage>/, console.txt.
source benchmarks/gpu/ab_common.sh
DEADLINE=${DEADLINE:-500}
STAGES=${STAGES:-mixtral dense}
DESIGN=${DESIGN:-crossover}
# GPUS: the two GPUs of the crossover (nvidia-smi indices: the servers' CUDA_VISIBLE_DEVICES), or the one of restarts
if [ "$DESIGN" = crossover ]; then PLACE=(--design crossover --gpus "${GPUS:-0,1}" --runs "${PERIODS:-6}")
else PLACE=(--design restarts ${GPUS:+--gpus "$GPUS"} --runs "${STARTS:-3}"); fi
AA_FLAG=(); [ -n "${AA:-}" ] && [ -f "$AA/parity.jsonl" ] && AA_FLAG=(--aa "$AA")
one_request_client() {  # one_request_client PROMPTS: the client's options, one request at a time
  echo --num-prompts "$1" --input-len "${IN:-128}" --output-len "${ONE_OUT:-128}" --concurrency 1 \
    --warmup-requests 1 --seed 1
}
moe_arms() {  # moe_arms SHAPE DIR RECORD: the arms' config folders (benchmarks/moe_ab_configs.py) on GPU $device
  # in DIR, one folder for every call of a run (its plan records the patches' path, which a resumed run must give),
  # copied to OUT/RECORD beside the run; fails where B was not tuned on this GPU (the script says so in one line)
  python3 benchmarks/moe_ab_configs.py "$2" --device "$device" --shape "$1" || return 1
  rm -rf "${OUT:?}/$3" && cp -r "$2" "$OUT/$3"
}
set -- $STAGES
SHARE=$(( (DEADLINE - $(elapsed)) / $# ))

for stage in $STAGES; do
  resume_from "$stage"
  stop_at=$(( $(elapsed) + SHARE ))
  case $stage in
  mixtral|mixtral-aa)
    # mixtral-aa: the same servers, both arms A (an A/A of this model and client: its design's licence, its floor)
    cfg=${MOE_CFG:-/tmp/ab-configs-$stage}  # a folder per stage: two jobs may run mixtral and mixtral-aa at once
    if [ "$stage" = mixtral-aa ]; then arms=(--control); b_is="SGLang's config too (an A/A)"
    else arms=(--patches "$cfg/patches"); b_is="our tuned configs"; fi
    device=$(python3 -c "import torch; print(torch.cuda.get_device_name())")
    moe_arms mixtral "$cfg" moe-configs || continue
    if [ "$device" = "NVIDIA H200" ]; then
      layers=${MIX_LAYERS:-32}; model=/tmp/model-mixtral-8x7b-tp2-$layers; preset=mixtral-8x7b-tp2-experts
      client=($(one_request_client "${MIX_PROMPTS:-24}")); mix_server=("${ONE_SERVER[@]}")
    else layers=4; model=/tmp/model-mixtral-8x7b; preset=mixtral-8x7b; client=("${CLIENT[@]}")
      mix_server=(--moe-runner-backend triton); fi
    [ -f "$model/config.json" ] || python3 benchmarks/make_moe_model.py "$model" --layers $layers --preset $preset
    echo "== $stage: A = SGLang's best available config, B = $b_is ($preset); $(( stop_at - $(elapsed) )) s"
    SGLANG_MOE_CONFIG_DIR="$cfg/baseline" astra-sglang ab --model-path "$model" --load-format dummy \
      "${PLACE[@]}" --rounds "$ROUNDS" --port "$PORT" "${arms[@]}" "${AA_FLAG[@]}" \
      --stop-after $(( stop_at - $(elapsed) )) --health-timeout 300 "${client[@]}" $(stagger_opts "$model") \
      --out "$OUT/$stage" -- "${SERVER_ARGS[@]}" "${mix_server[@]}"
    echo "== $stage: exit $? at $(elapsed) s"; mark_started "$model" "$OUT/$stage"; report_line "$OUT/$stage" ;;
  dense)
    rm -rf /tmp/ab-dense-patches && cp -r patches /tmp/ab-dense-patches
    astra-sglang patch disable merge_attn_states_lse --patches /tmp/ab-dense-patches
    astra-sglang patch list --patches /tmp/ab-dense-patches
    echo "== dense: A unpatched, B the shipped patches; $(( stop_at - $(elapsed) )) s"
    astra-sglang ab --model-path "$MODEL" "${PLACE[@]}" --rounds "$ROUNDS" --port "$PORT" \
      --patches /tmp/ab-dense-patches "${AA_FLAG[@]}" --stop-after $(( stop_at - $(elapsed) )) --health-timeout 300 \
      "${CLIENT[@]}" $(stagger_opts "$MODEL") --out "$OUT/dense" -- "${SERVER_ARGS[@]}"
    echo "== dense: exit $? at $(elapsed) s"; mark_started "$MODEL" "$OUT/dense"; report_line "$OUT/dense" ;;
  dsv2lite|dsv2lite-tuned|dsv2lite-aa)
    model=/tmp/model-dsv2lite-experts-${DSV2_LAYERS:-26}
    [ -f "$model/config.json" ] || python3 benchmarks/make_moe_model.py "$model" --layers "${DSV2_LAYERS:-26}" \
      --preset deepseek-v2-lite-experts
    device=$(python3 -c "import torch; print(torch.cuda.get_device_name())")
    if [ "$device" != "NVIDIA H200" ]; then  # B's file is named for the H200 and tuned there
      echo "== $stage: B's configs were tuned on an NVIDIA H200, this is an $device: not run"; continue
    fi
    if [ "$stage" = dsv2lite ]; then a_env=(); a_is="SGLang's default config"; b_is="our batch-1 file"
      arms=(--patches
            benchmarks/results/2026-11-27-h200/moe-bar/ours-deepseek-v2-lite-1/tiers/strict/deepseek-v2-lite-1/patches)
    else  # a folder per stage: two jobs of host_split.sh may run dsv2lite-tuned and dsv2lite-aa at once
      cfg=${DSV2_CFG:-/tmp/ab-configs-$stage}; moe_arms dsv2lite "$cfg" "moe-configs-$stage" || continue
      a_env=(SGLANG_MOE_CONFIG_DIR="$cfg/baseline"); a_is="SGLang tuner's best at batch 1 and 64"
      if [ "$stage" = dsv2lite-aa ]; then arms=(--control); b_is="the same (an A/A)"
      else arms=(--patches "$cfg/patches"); b_is="ours at batch 1 and 64"; fi
    fi
    b1=($(one_request_client "${DSV2_PROMPTS:-48}"))
    echo "== $stage: A = $a_is, B = $b_is; $(( stop_at - $(elapsed) )) s"
    env "${a_env[@]}" astra-sglang ab --model-path "$model" --load-format dummy "${PLACE[@]}" --rounds "$ROUNDS" \
      --port "$PORT" "${arms[@]}" "${AA_FLAG[@]}" --stop-after $(( stop_at - $(elapsed) )) --health-timeout 300 \
      "${b1[@]}" $(stagger_opts "$model") --out "$OUT/$stage" -- "${SERVER_ARGS[@]}" "${ONE_SERVER[@]}"
    echo "== $stage: exit $? at $(elapsed) s"; mark_started "$model" "$OUT/$stage"; report_line "$OUT/$stage" ;;
  *) echo "unknown stage $stage" ;;
  esac
done
find "$OUT" -name "*.log" -size +2M -exec truncate -s 2M {} \;
echo "== done at $(elapsed) s"
