#!/usr/bin/env bash
# GPU call C, for the agent-loop issue: the built-in tuner on silu_and_mul and fused_add_rmsnorm (start: the
# shipped hand-written kernels; final evaluation against SGLang's own ops), and one scripted LLM run.
# Usage (repo root, GPU machine; carry .stage): bash benchmarks/gpu/call_b.sh OUTDIR
set -u
OUTDIR=${1:?OUTDIR}; mkdir -p "$OUTDIR"
source benchmarks/gpu/setup.sh > "$OUTDIR/env.txt"
export ASTRA_TUNER_MAX_CONFIGS=${ASTRA_TUNER_MAX_CONFIGS:-6}
declare -A BASE=([silu_and_mul]=py:astra_sglang.ops.adapters:sglang_silu_and_mul [fused_add_rmsnorm]=py:sgl_kernel:fused_add_rmsnorm)
for op in ${OPS:-silu_and_mul}; do
  astra-sglang optimize $op --rounds ${ROUNDS:-2} --from patches/$op/kernel.cu --baseline ${BASE[$op]} \
    --out /tmp/tune-$op --patches-dir /tmp/tuned 2>&1 | tail -6
  cp /tmp/tune-$op/tuner.md "$OUTDIR/tuner-$op.md"; cp /tmp/tune-$op/final.json "$OUTDIR/tuner-$op-final.json"
done
python3 benchmarks/gpu/scripted_llm_run.py /tmp/llm-run 2>&1 | tail -12
cp /tmp/llm-run/report.md "$OUTDIR/llm-run-report.md" 2>/dev/null; cp /tmp/llm-run/rounds.jsonl "$OUTDIR/llm-run-rounds.jsonl"
tar -C /tmp -czf "$OUTDIR/tuned-patches.tgz" tuned 2>/dev/null
python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_harness_gpu.py -k "cheats" 2>&1 | tail -4 | tee "$OUTDIR/pytest-cheats.txt"
