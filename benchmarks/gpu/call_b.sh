#!/usr/bin/env bash
# GPU call B: the shipped kernels against SGLang's own (kernels.sh), their manifests, the harness GPU
# tests, and a serving A/B of a real SGLang server (dummy weights) with and without the patches.
# Usage (repo root, GPU machine; carry .stage): bash benchmarks/gpu/call_b.sh OUTDIR
set -u
OUTDIR=${1:?OUTDIR}; mkdir -p "$OUTDIR"
source benchmarks/gpu/setup.sh > "$OUTDIR/env.txt"; cat "$OUTDIR/env.txt"
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
bash benchmarks/gpu/kernels.sh /tmp/k time-bf16 > /dev/null 2>&1
grep -E "geomean|FAILED" /tmp/k/kernels.log; cp /tmp/k/kernels.log "$OUTDIR/kernels.log"; cp /tmp/k/kernels.jsonl "$OUTDIR/"
python3 benchmarks/record_patch_measurements.py /tmp/k/kernels.jsonl "$GPU" "$(date +%F)"
tar -czf "$OUTDIR/manifests.tgz" patches/*/manifest.json
# FA3 is stripped from the runtime kit: the merge patch's target module cannot load there.
astra-sglang patch disable merge_attn_states_lse --patches patches
timeout 330 astra-sglang ab --model-path /tmp/model --load-format dummy --runs 1 --patches patches \
  --num-prompts 256 --input-len 512 --output-len 128 --concurrency 32 --out /tmp/ab -- \
  --attention-backend triton --sampling-backend pytorch --grammar-backend none --cuda-graph-max-bs-decode 64 \
  --mem-fraction-static 0.8 2>&1 | tail -15
cp /tmp/ab/ab.md "$OUTDIR/" 2>/dev/null; tar -czf "$OUTDIR/ab.tgz" -C /tmp ab 2>/dev/null
astra-sglang report --stats-dir "$(ls -d /tmp/ab/stats/B-* | head -1)" 2>&1 | tail -12
python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_harness_gpu.py 2>&1 | tail -8 > "$OUTDIR/pytest-gpu.txt"
cat "$OUTDIR/pytest-gpu.txt"
