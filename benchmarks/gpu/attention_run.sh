#!/usr/bin/env bash
# SGLang's Triton decode and extend attention in one GPU command (under 9 minutes on an H100): tune their launch
# configs for Llama-3-8B's attention (32 q heads, 8 kv heads, head dim 128, bf16) at a few buckets against the
# config SGLang's launchers pick themselves, write the winners as launch patches and, where the time allows,
# profile the kit's dummy Llama-3-8B (triton attention backend) unpatched and patched, in place.
# benchmarks/attention_run.py does the stages; DEADLINE (seconds, default 520; DECODE_BUDGET 300 and EXTEND_BUDGET 170 the searches, KERNELS="decode extend" which) bounds them together, STEPS (20)
# the profiled steps per load. Every server a stage starts is stopped when it ends or runs out of time.
# The searches fill one command; the in-place profiles run where time is left, or in a second command with
# PATCHES=DIR (an earlier run's OUT/patches.tar.gz unpacked: tuning skipped).
# Usage (GPU machine, repo root, .stage/ carried: see setup.sh): [PATCHES=DIR] bash benchmarks/gpu/attention_run.sh OUT
# Writes, flat: OUT/results.jsonl, OUT/summary.md, OUT/tune-{decode,extend}.md, OUT/{base,patched}.{md,json},
# OUT/<stage>.log.txt.
set -u
OUT=${1:?usage: attention_run.sh OUTDIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
source benchmarks/gpu/setup.sh
export ASTRA_SGLANG_CACHE=${ASTRA_SGLANG_CACHE:-/tmp/astra-cache}
exec python3 benchmarks/attention_run.py "$OUT"
