#!/usr/bin/env bash
# The Mixtral-shaped serving A/B's two servers, profiled kernel by kernel (`astra-sglang profile`, decode load at
# CONC concurrent requests, default 1: the A/B's one-request client), A then B with --compare: the fused MoE
# kernel's time a decode step in place, against its isolated 1.044x at batch 1. The crossover A/B on 2x H200
# (benchmarks/results/2026-11-28-h200/serving/mixtral-ab) gave -1.80% ITL, half of what that ratio and the MoE
# calls' share of the step predicted: this says which part of the step kept the rest.
# Usage (GPU machine with an H200, repo root, .stage carried): bash benchmarks/gpu/moe_profile.sh OUTDIR
# (each profile is cut at 250 s, so that set-up and both fit one 10-minute command on a fresh machine)
# Writes OUTDIR/{base,patched}/profile.{json,md} (and patched/profile.png), OUTDIR/console.txt.
set -u
OUTDIR=$(realpath -m "${1:?usage: moe_profile.sh OUTDIR}"); mkdir -p "$OUTDIR"
exec > >(tee -a "$OUTDIR/console.txt") 2>&1
source benchmarks/gpu/setup.sh
PORT=${PORT:-30123}
cleanup() {  # the profile stops its server; this catches one left by a kill, by its port
  for pid in $(pgrep -f "sglang.launch_server.*--port $PORT( |$)" || true); do
    kill -9 -- "-$(ps -o pgid= -p "$pid" | tr -d ' ')" 2>/dev/null
  done
}
trap cleanup EXIT
device=$(python3 -c "import torch; print(torch.cuda.get_device_name())")
cfg=${MOE_CFG:-/tmp/ab-configs-profile}  # A's config tree and B's patch, as the A/B's mixtral stage builds them
python3 benchmarks/moe_ab_configs.py "$cfg" --device "$device" || exit 1
[ "$device" = "NVIDIA H200" ] || { echo "the 32-layer TP2 model's B was tuned on an H200; this is an $device"; exit 2; }
model=/tmp/model-mixtral-8x7b-tp2-32
[ -f "$model/config.json" ] || python3 benchmarks/make_moe_model.py "$model" --layers 32 --preset mixtral-8x7b-tp2-experts
source benchmarks/gpu/server_args.sh  # the A/B's servers: its one-request stages' arguments
SERVER=(--model-path "$model" --load-format dummy "${SERVER_ARGS[@]}" "${ONE_SERVER[@]}")
LOAD=(--workload decode --concurrency "${CONC:-1}" --steps "${STEPS:-30}" --port "$PORT" --health-timeout 300)
export SGLANG_MOE_CONFIG_DIR="$cfg/baseline"
timeout 250 astra-sglang profile "${LOAD[@]}" --out "$OUTDIR/base" -- "${SERVER[@]}"
echo "== A (SGLang's H200 file): exit $?"
[ -f "$OUTDIR/base/profile.json" ] || exit 1
timeout 250 astra-sglang profile --patched --patches "$cfg/patches" --compare "$OUTDIR/base/profile.json" "${LOAD[@]}" \
  --out "$OUTDIR/patched" -- "${SERVER[@]}"
echo "== B (our configs over it): exit $?"
find "$OUTDIR" -name "*.trace.json*" -size +20M -delete  # the tables keep what the traces said
