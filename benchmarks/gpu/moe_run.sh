#!/usr/bin/env bash
# fused_moe on a MoE model in one GPU command: make the model (Qwen3-30B-A3B's architecture, 4 layers, dummy
# weights), profile it, tune SGLang's Triton fused_moe config at the batch sizes the server ran (against the
# config SGLang picks itself, through the isolated evaluator), profile again with the tuned configs patched in,
# and print a short table last (per batch size: SGLang's pick and the speedup; in place: the fused MoE kernel's
# time per step before and after). benchmarks/moe_run.py does the stages; DEADLINE (seconds, default 500)
# bounds them together, STEPS (20) the profiled steps per load.
# Usage (GPU machine, repo root, .stage/ carried: see setup.sh): bash benchmarks/gpu/moe_run.sh OUT
# Writes, flat: OUT/{base,patched}.{md,json} (profiles), OUT/tune.{md,json}, OUT/tuned-config.json (the file
# in SGLang's format), OUT/summary.md (the table printed last).
set -u
OUT=${1:?usage: moe_run.sh OUTDIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
source benchmarks/gpu/setup.sh
export ASTRA_SGLANG_CACHE=${ASTRA_SGLANG_CACHE:-/tmp/astra-cache}
exec python3 benchmarks/moe_run.py "$OUT"
