#!/usr/bin/env bash
# GPU calls of the second session (agent loop + shipped kernels). Steps run in the order given:
#   probe      does SGLang's sgl_kernel.silu_and_mul fault at widths that are not a multiple of 8? (bf16)
#   tune-silu  `astra-sglang optimize silu_and_mul --rounds 5` with no LLM: the tuner, winner into patches/
#   tune-fused the same for fused_add_rmsnorm, 2 rounds
#   tests      the harness GPU tests added since the last run
#   merge      patches/merge_state (base-2 build) against flashinfer's kernel: time bf16 + checks
#   memcheck   compute-sanitizer memcheck of every patch
#   ncu        Nsight Compute per shape, ours vs SGLang (benchmarks/ncu_table.py)
# Usage (repo root, GPU machine; carry .stage): bash benchmarks/gpu/call_d.sh OUTDIR STEP...
set -u
OUTDIR=${1:?OUTDIR}; shift; mkdir -p "$OUTDIR"
source benchmarks/gpu/setup.sh > "$OUTDIR/env.txt"; cat "$OUTDIR/env.txt"
export ASTRA_TUNER_MAX_CONFIGS=${ASTRA_TUNER_MAX_CONFIGS:-12}
t0=$(date +%s)
for step in "$@"; do
  echo "=== $step (t=$(( $(date +%s) - t0 ))s)"
  case $step in
    probe)
      for d in 4096 4100 4104 4098; do
        timeout 120 python3 -c "
import torch, sgl_kernel
x = torch.randn(5, 2 * $d, dtype=torch.bfloat16, device='cuda'); o = torch.empty(5, $d, dtype=torch.bfloat16, device='cuda')
sgl_kernel.silu_and_mul(x, o); torch.cuda.synchronize()
ref = torch.nn.functional.silu(x[:, :$d].float()) * x[:, $d:].float()
print('sgl_kernel.silu_and_mul d=$d bf16: ok, max err', (o.float() - ref).abs().max().item())" 2>&1 | grep -E "ok, max err|Error|error" | tail -1 | sed "s/^/d=$d: /"
      done | tee "$OUTDIR/probe.txt" ;;
    tune-silu|tune-fused)
      op=$([ $step = tune-silu ] && echo silu_and_mul || echo fused_add_rmsnorm)
      rounds=$([ $step = tune-silu ] && echo 5 || echo ${FUSED_ROUNDS:-2})
      timeout ${TUNE_TIMEOUT:-330} astra-sglang optimize $op --rounds $rounds --out /tmp/tune-$op --patches-dir patches \
        2>&1 | tail -8
      mkdir -p "$OUTDIR/tune-$op"
      cp /tmp/tune-$op/{tuner.md,tuner.jsonl,final.json} "$OUTDIR/tune-$op/" 2>/dev/null
      cp patches/$op/kernel.cu patches/$op/manifest.json "$OUTDIR/tune-$op/" 2>/dev/null
      head -3 /tmp/tune-$op/tuner.md ;;
    tests)
      timeout 300 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_harness_gpu.py \
        -k "baseline_fault or faults_fail or honest" 2>&1 | tail -4 | tee "$OUTDIR/pytest-gpu.txt" ;;
    merge)
      OPS=merge_state timeout 200 bash benchmarks/gpu/kernels.sh /tmp/km time-bf16 check > /dev/null 2>&1
      grep -E "geomean|FAILED|fail" /tmp/km/kernels.log | head; cp /tmp/km/kernels.log "$OUTDIR/merge_state.log"
      cp /tmp/km/kernels.jsonl "$OUTDIR/merge_state.jsonl" ;;
    memcheck)
      CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
      timeout 300 "$CS" --tool memcheck --error-exitcode 9 --print-limit 20 python3 benchmarks/memcheck.py \
        > "$OUTDIR/memcheck.txt" 2>&1; echo "compute-sanitizer exit code $?" | tee -a "$OUTDIR/memcheck.txt"
      grep -E "^memcheck|ERROR SUMMARY|exit code" "$OUTDIR/memcheck.txt" ;;
    ncu)
      timeout 300 python3 benchmarks/ncu_table.py /tmp/ncu ${NCU_SHAPES:-} 2>&1 | tail -20
      cp /tmp/ncu/ncu.md /tmp/ncu/ncu.jsonl "$OUTDIR/" 2>/dev/null ;;
    *) echo "unknown step $step" ;;
  esac
done
echo "=== done (t=$(( $(date +%s) - t0 ))s)"
