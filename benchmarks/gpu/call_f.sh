#!/usr/bin/env bash
# GPU calls of sessions 3-8 (kernel variants, tables, per-call cost, peers). Steps in order:
#   variants PLAN...  benchmarks/gpu/variants.py (variants of a patch side by side, each vs SGLang)
#   time | check      benchmarks/gpu/kernels.sh time-bf16 time-fp16 / check on the shipped patches
#                     (plan `models`: the spec's model shape sets, bf16, shipped patches vs SGLang, time only)
#   memcheck | ncu | percall | peers   see benchmarks/memcheck.py, ncu_table.py, per_call.py, gpu/peers.sh
#   percall-py        per_call.py with the C++ fast path switched off (ASTRA_SGLANG_FASTCALL=0): the Python path
#   pytest PATH... -- the GPU-marked tests in PATHs (log in OUTDIR/pytest-gpu.txt)
#   check-effect      benchmarks/gpu/check_effect.py (checked vs unchecked timing, GPU clocks; rmsnorm 16384x8192)
#   sandwich          benchmarks/gpu/sandwich.py (the norm and silu in place between GEMMs, PDL on / off)
#   stream            benchmarks/gpu/stream_sizes.py (a no-math load/store kernel's best per size: bounds_table --stream-probe)
# Usage (repo root, GPU machine, with the runtime kit in .stage): bash benchmarks/gpu/call_f.sh OUTDIR STEP...
# OPS="op ..." limits time, check and memcheck to those ops.
set -u
OUTDIR=${1:?OUTDIR}; shift; mkdir -p "$OUTDIR"
source benchmarks/gpu/setup.sh > "$OUTDIR/env.txt"; cat "$OUTDIR/env.txt"
t0=$(date +%s)
while [ $# -gt 0 ]; do
  step=$1; shift
  echo "=== $step (t=$(( $(date +%s) - t0 ))s)"
  case $step in
    variants)
      plans=(); while [ $# -gt 0 ] && [[ $1 != -- ]]; do plans+=("$1"); shift; done; [ $# -gt 0 ] && shift
      timeout ${VARIANTS_TIMEOUT:-420} python3 benchmarks/gpu/variants.py "$OUTDIR" "${plans[@]}" 2>&1 \
        | tee -a "$OUTDIR/variants.log" | grep -E "^SUMMARY|Error|error" ;;
    ncu)  # optional op:TxD items up to "--"; default every paper shape
      items=(); while [ $# -gt 0 ] && [[ $1 != -- ]]; do items+=("$1"); shift; done; [ $# -gt 0 ] && shift
      timeout ${NCU_TIMEOUT:-400} python3 benchmarks/ncu_table.py "$OUTDIR/ncu" "${items[@]}" 2>&1 | tail -60 ;;
    pytest)
      paths=(); while [ $# -gt 0 ] && [[ $1 != -- ]]; do paths+=("$1"); shift; done; [ $# -gt 0 ] && shift
      timeout ${PYTEST_TIMEOUT:-240} python3 -m pytest -m gpu -q -rs "${paths[@]}" > "$OUTDIR/pytest-gpu.txt" 2>&1
      echo "pytest exit code $?" >> "$OUTDIR/pytest-gpu.txt"; tail -8 "$OUTDIR/pytest-gpu.txt" ;;
    check-effect)
      timeout 240 python3 benchmarks/gpu/check_effect.py "$OUTDIR/check-effect" 2>&1 | tail -12 ;;
    stream)
      timeout ${STREAM_TIMEOUT:-150} python3 benchmarks/gpu/stream_sizes.py "$OUTDIR/stream" 2>&1 | tail -60 ;;
    percall)
      timeout 240 python3 benchmarks/per_call.py "$OUTDIR/percall" --tokens ${PERCALL_TOKENS:-1,16,64} 2>&1 | tail -30 ;;
    sandwich)  # in-situ cost of fused_add_rmsnorm + silu_and_mul between GEMMs in one CUDA graph
      timeout ${SANDWICH_TIMEOUT:-240} python3 benchmarks/gpu/sandwich.py "$OUTDIR/sandwich" 2>&1 | tail -20 ;;
    percall-py)
      ASTRA_SGLANG_FASTCALL=0 timeout 240 python3 benchmarks/per_call.py "$OUTDIR/percall-py" 2>&1 | tail -16 ;;
    peers)
      timeout ${PEERS_TIMEOUT:-420} bash benchmarks/gpu/peers.sh "$OUTDIR/peers" > /dev/null 2>&1; tail -12 "$OUTDIR/peers/peers.log" ;;
    time)
      timeout 420 bash benchmarks/gpu/kernels.sh "$OUTDIR/kernels" time-bf16 time-fp16 > /dev/null 2>&1
      grep -E "geomean|FAILED|\\[" "$OUTDIR/kernels/kernels.log" | tail -20 ;;
    check)
      timeout 300 bash benchmarks/gpu/kernels.sh "$OUTDIR/check" check > /dev/null 2>&1
      grep -E "passed|FAILED|fail|\\[" "$OUTDIR/check/kernels.log" | tail -20 ;;
    memcheck)
      CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
      timeout 300 "$CS" --tool memcheck --error-exitcode 9 --print-limit 20 python3 benchmarks/memcheck.py ${OPS:-} \
        > "$OUTDIR/memcheck.txt" 2>&1; echo "compute-sanitizer exit code $?" | tee -a "$OUTDIR/memcheck.txt"
      grep -E "^memcheck|ERROR SUMMARY|exit code" "$OUTDIR/memcheck.txt" ;;
    *) echo "unknown step $step" ;;
  esac
done
echo "=== done (t=$(( $(date +%s) - t0 ))s)"
