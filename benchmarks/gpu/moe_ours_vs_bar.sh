#!/usr/bin/env bash
# Ours against SGLang's own fused MoE tuner, one shape, in one GPU command of at most ~9 minutes, on the same GPUs:
#   1. our two tiers (moe_tiers.sh: SGLang's whole space screened per batch size, the finalists judged by the strict
#      evaluator against SGLang's pick) within TIERS_S, their wall kept;
#   2. their answer exported (moe_tiers_export.py: ours.json, ranked.json);
#   3. SGLang's tuner over its whole space (moe_sglang_bar.sh, MODE=exhaustive) with OURS: the report's "ours /
#      tuner best" column by the strict evaluator and by the script's own timing.
# OUTDIR/walls.txt says both walls: ours (the tiers' command, and of it the tuner's own process: the figure set
# against SGLang's users' wall, which leaves out installation too) and SGLang's (this run's, and its users' estimate).
# Usage (repo root, GPU machine, .stage and the SGLang tuner folder carried; see moe_sglang_bar.sh):
#   PRESET=qwen3-30b-a3b BATCH_SIZES=1,64 bash benchmarks/gpu/moe_ours_vs_bar.sh OUTDIR
# host_split.sh runs it as its bar job (GPUs 2,3): BAR_SCRIPT=benchmarks/gpu/moe_ours_vs_bar.sh BAR_DEADLINE=280
# (BAR_DEADLINE becomes this script's DEADLINE: the bar's python part, after the tiers' TIERS_S).
# A TIERS_S too short for every batch size is refused at once (exit 3, before any worker or the bar: the line names
# the TIERS_S that fits); check a call ahead on the CPU with moe_tiers_bench.py --plan-only GPU_NAME --require and
# the call's --gpus, --cores, --deadline, --shapes, --buckets.
# env: PRESET, BATCH_SIZES (1,64), TIERS_S (our tiers' deadline, 200 s), DEADLINE (the bar's python part, 280 s),
#      KNOB (the tiers' source knob: splitk; empty: none), TIERS_SCRIPT, BAR_RUNNER (not BAR_SCRIPT: host_split.sh
#      names this script by that), SETUP (their CPU test swaps in stand-ins); the bar's own variables
#      (TUNER_SHARE, WARM_SHARE, COLD_SAMPLE, COLD_SECONDS, TUNER_FROM, ...) pass through. With TUNER_FROM (earlier
#      runs' OUTs on this GPU and shape, e.g. the committed benchmarks/results/2026-11-27-h200/moe-bar/ folders)
#      SGLang's tuner is not run again: ours is judged against its committed best, and the call has time for more
#      batch sizes (TIERS_S=280 DEADLINE=150, inside host_split.sh's 560 s job with the two set-ups).
# Time: our tiers screened 1,504 configs in 97 s at Mixtral batch 64 on one H200 (moe-tiers page, 2026-11-27); SGLang's
# exhaustive tuner took 283-285 s of wall for two batch sizes on two H200s (moe-bar page), so 200 + 280 s plus two
# set-ups (~30 s each) fit a 560 s job.
set -u
OUTDIR=$(realpath -m "${1:-${OUT:-/tmp/moe-ours-vs-bar}}"); mkdir -p "$OUTDIR"
PRESET=${PRESET:?PRESET: one of the bar presets (moe_sglang_bar.sh)}
BATCH_SIZES=${BATCH_SIZES:-1,64}
T0=$(date +%s)
# this shell runs the export and reads the records too (the two scripts set themselves up the same way)
source "${SETUP:-benchmarks/gpu/setup.sh}" > "$OUTDIR/env.txt" 2>&1

# EXTRA = the same batch sizes: nothing beyond them is planned
# REQUIRE: a plan that would leave a batch size of the comparison unjudged is refused before any worker starts
SHAPES="$PRESET" BUCKETS="$BATCH_SIZES" EXTRA="$BATCH_SIZES" KNOB="${KNOB-splitk}" DEADLINE="${TIERS_S:-200}" REQUIRE=1 \
  bash "${TIERS_SCRIPT:-benchmarks/gpu/moe_tiers.sh}" "$OUTDIR/tiers" > "$OUTDIR/tiers.console" 2>&1
tiers_rc=$?
ours_s=$(( $(date +%s) - T0 ))
echo "our two tiers: exit code $tiers_rc after $ours_s s"; tail -25 "$OUTDIR/tiers.console"
if [ $tiers_rc -eq 3 ]; then  # nothing of ours to compare: the bar is not run either
  echo "refused: $(grep -m1 '^error: ' "$OUTDIR/tiers/bench.log" | cut -c8-) (TIERS_S)"; exit 3
fi

bar_env=()
if python3 benchmarks/moe_tiers_export.py "$OUTDIR/tiers" "$PRESET" "$OUTDIR/ours"; then
  bar_env=("OURS=$OUTDIR/ours/ours.json" "RANKED=$OUTDIR/ours/ranked.json")
else
  echo "no answer of ours to compare (the export failed): SGLang's tuner runs alone"
fi
env "${bar_env[@]}" PRESET="$PRESET" BATCH_SIZES="$BATCH_SIZES" MODE=exhaustive DEADLINE="${DEADLINE:-280}" \
  bash "${BAR_RUNNER:-benchmarks/gpu/moe_sglang_bar.sh}" "$OUTDIR/bar"
bar_rc=$?
tuner_s=$(cat "$OUTDIR/tiers/tuner_wall_s" 2>/dev/null || echo "?")
{ echo "ours: our two tiers' command, ${ours_s} s (exit code $tiers_rc), batch sizes $BATCH_SIZES; the tuner's own" \
    "process ${tuner_s} s, the rest this machine's set-up (the checkout installed, the SGLang kit)"
  python3 - "$OUTDIR/bar/tuner.json" <<'EOF' 2>/dev/null || echo "SGLang's tuner: no tuner.json"
import sys
from astra_sglang.triton.moe.sglang_tuner_records import TunerRun
run = TunerRun.model_validate_json(open(sys.argv[1]).read())
users = run.users_wall()
import os
which = "its earlier runs' walls" if os.environ.get("TUNER_FROM") else "this run's wall"
print(f"SGLang's tuner: {which} {run.wall_s:.0f} s (warm {run.warm_s:.0f} s, timing {run.timing_s:.0f} s); "
      f"its users' wall " + (f"{users / 60:.1f} min, estimated from the cold sample" if users else "not estimated"))
EOF
} | tee "$OUTDIR/walls.txt"
[ $tiers_rc -eq 0 ] && exit $bar_rc
exit $tiers_rc
