#!/usr/bin/env bash
# Op families shipped disabled (default: the gelu and Gemma norm families, gelu_and_mul, gelu_tanh_and_mul,
# gemma_rmsnorm, gemma_fused_add_rmsnorm; FAMILIES="rotary_embedding topk_softmax per_token_group_quant_fp8 ..." by name) on one GPU in one command,
# and the figures their patch manifests need:
#   warm-up   benchmarks/families_warmup.py: SGLang's JIT kernels compiled (activations, rope, FP8 quant) and sgl_kernel's Gemma
#             norms loaded, next to our builds
#   run_all   benchmarks/gpu/run_all.sh with these ops: per_call (each op's eager call against SGLang's own, 1/16/64
#             tokens at its model's widths: per_call.py CALLS_AS), timed (`astra-sglang bench OP`: the shipped patch,
#             for a variant op the sibling op's kernel file with the manifest's define, against SGLang's op, kernel
#             only, CUDA graphs, L2 cold, bf16, SETS) and checks (the harness's trials on CHECK_SETS in
#             each spec's dtypes, no timing)
#   sanitize  benchmarks/memcheck.py: compute-sanitizer memcheck and racecheck over the ops whose rows pass
#   record    benchmarks/families_record.py: the timed rows into copies of the ops' manifests (`measured`,
#             provenance), gate_max_bytes from the largest call every check passed, enabled where every check
#             passed, every timed shape has SGLang's figure, the geomean is at least 1, no shape is below 0.95x, no
#             eager call costs more than 1/0.95 of SGLang's and compute-sanitizer was clean (else left off with the figure in
#             `off_reason`), OUT/families.md
# Writes OUT/{per_call,kernels-*,checks,sources,sanitize}.jsonl, OUT/per_call.md, OUT/families.md, OUT/run.log and
# OUT/manifests/<op>/manifest.json.
#
# Usage (GPU machine, repo root, SGLang importable or its runtime kit unpacked as .stage/: see setup.sh):
#   COMMIT=<git rev-parse --short HEAD> bash benchmarks/gpu/families.sh OUT
# Then, in a checkout: copy OUT/manifests/*/manifest.json over patches/*/manifest.json and OUT/*.jsonl to
# benchmarks/results/<date>-<gpu>/families/, and commit them. BUDGET bounds run_all's three steps (setup, builds
# and the warm-up come before it); its default, "shapes", sizes it by the ops' timed shapes (run_all.sh: each op's
# timed evaluation gets at least its start plus 5 s a shape; a fixed 300 s over rope, FP8 quant and topk_softmax cut
# rope's at 44 s). About 5-6 minutes on an H200 for those three. FAMILIES="op ..." runs a subset.
set -u
OUT=${1:?usage: families.sh OUTDIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
FAMILIES=${FAMILIES:-"gelu_and_mul gelu_tanh_and_mul gemma_rmsnorm gemma_fused_add_rmsnorm"}
SETS=${SETS:-paper+quick+held_out}
source benchmarks/gpu/setup.sh

# per_call.py times a patch set's enabled patches: a copy of patches/ with exactly these ops enabled.
rm -rf "$OUT/patches"
cp -r patches "$OUT/patches"
python3 - "$OUT/patches" $FAMILIES <<'PY'
import sys
from pathlib import Path
from astra_sglang.patchset.manifest import PatchManifest
root, ops = Path(sys.argv[1]), set(sys.argv[2:])
for folder in sorted(p for p in root.iterdir() if (p / "manifest.json").is_file()):
    manifest = PatchManifest.load(folder)
    manifest.enabled = manifest.op in ops
    manifest.save(folder)
PY

# SGLang's ops once each (its JIT kernels compile at their first call, cached on disk for the steps), outside the
# budget: benchmarks/families_warmup.py holds one warm-up per op.
echo "== warm-up: SGLang's ops once each, outside the budget"
timeout 300 python3 benchmarks/families_warmup.py --sets "$SETS" $FAMILIES

OPS=$FAMILIES SETS=$SETS CHECK_SETS=${CHECK_SETS:-edge+quick+held_out} \
  BUDGET=${BUDGET:-shapes} RESERVE=${RESERVE:-80} PER_CALL_ARGS="--patches $OUT/patches" SUMMARIZE=0 \
  bash benchmarks/gpu/run_all.sh "$OUT"

# compute-sanitizer over the ops whose rows would enable them (the shipping rule: memcheck and racecheck clean);
# the others are left off by their figures without it.
SANITIZE=$(python3 benchmarks/families_record.py --candidates "$OUT" $FAMILIES)
rm -f "$OUT/sanitize.jsonl"
if [ -n "$SANITIZE" ]; then
  echo "== sanitize: $SANITIZE"
  timeout "${SANITIZE_S:-240}" python3 benchmarks/memcheck.py --patches "$OUT/patches" --out "$OUT/sanitize.jsonl" \
    $SANITIZE 2>&1 | tail -20
fi

echo "== record"
DATE=$(date -u +%F)
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
COMMIT=${COMMIT:-${ASTRA_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}}
python3 benchmarks/families_record.py "$OUT" "$GPU" "$DATE" \
  "$GPU, $DATE, commit $COMMIT, \`bash benchmarks/gpu/families.sh OUT\`" $FAMILIES
rm -rf "$OUT/patches"
cat "$OUT/families.md"
