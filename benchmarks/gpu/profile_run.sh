#!/usr/bin/env bash
# `astra-sglang profile` on the runtime kit's model, unpatched and then patched (the kernel-level in-place A/B),
# both loads (decode-heavy, prefill-heavy), in one GPU command; also trims the unpatched traces into the CPU
# tests' fixtures (tests/fixtures/profile/).
# Usage (GPU machine, repo root, .stage/ carried): bash benchmarks/gpu/profile_run.sh OUTDIR
# Writes (flat, so that they come back): OUTDIR/{base,patched}.{json,md}, OUTDIR/patched.png,
# OUTDIR/fixture-{decode,prefill}.trace.json.gz, OUTDIR/checks-fused_add_rmsnorm.jsonl; prints both profiles' tables and the before/after table.
set -u
OUTDIR=${1:?output dir}
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
source benchmarks/gpu/setup.sh
export ASTRA_SGLANG_CACHE=/tmp/astra-cache
WORK=/tmp/astra-profile
rm -rf "$WORK"
cleanup() { pkill -9 -f sglang.launch_server 2>/dev/null; pkill -9 -f sglang.benchmark 2>/dev/null; }
trap cleanup EXIT
SERVER=(--model-path /tmp/model --load-format dummy --attention-backend triton --sampling-backend pytorch
        --grammar-backend none --cuda-graph-max-bs-decode 128 --mem-fraction-static 0.8)
STEPS=${STEPS:-30}
# The patches and the C++ fast path build on the CPUs while the unpatched server runs (the patched run finds them cached).
python3 -m astra_sglang.cli launch --dry-run -- --model-path /tmp/model > "$WORK.prebuild.log" 2>&1 &
timeout 330 python3 -m astra_sglang.cli profile --out "$WORK/base" --steps "$STEPS" --health-timeout 240 -- "${SERVER[@]}" \
  > "$WORK.base.log" 2>&1
echo "== unpatched: exit $?"; tail -45 "$WORK.base.log"
[ -f "$WORK/base/profile.json" ] || { tail -30 "$WORK/base/server.log" 2>/dev/null; exit 1; }
cp "$WORK/base/profile.json" "$OUTDIR/base.json"; cp "$WORK/base/profile.md" "$OUTDIR/base.md"
for phase in decode prefill; do
  trace=$(ls "$WORK"/base/traces/$phase/*.trace.json.gz | head -1)
  python3 -c "import sys; from astra_sglang.profile.trace import trim; trim(sys.argv[1], sys.argv[2], 4)" \
    "$trace" "$OUTDIR/fixture-$phase.trace.json.gz"
done
ls -la "$OUTDIR"
wait
timeout 240 python3 -m astra_sglang.cli profile --patched --compare "$WORK/base/profile.json" --out "$WORK/patched" \
  --steps "$STEPS" --health-timeout 200 -- "${SERVER[@]}" > "$WORK.patched.log" 2>&1
echo "== patched: exit $?"; tail -60 "$WORK.patched.log"
for f in json md png; do cp "$WORK/patched/profile.$f" "$OUTDIR/patched.$f" 2>/dev/null; done
[ -f "$WORK/patched/profile.json" ] || tail -30 "$WORK/patched/server.log" 2>/dev/null
# The harness's checks of fused_add_rmsnorm on the edge and held-out shapes again (results page rows).
STEPS=checks OPS=fused_add_rmsnorm BUDGET=80 RESERVE=80 COMMIT=${COMMIT:-} timeout 150 bash benchmarks/gpu/run_all.sh /tmp/ra-checks \
  > /tmp/ra-checks.log 2>&1
cp /tmp/ra-checks/checks.jsonl "$OUTDIR/checks-fused_add_rmsnorm.jsonl" 2>/dev/null; grep -E "geomean|FAILED" /tmp/ra-checks.log
