#!/usr/bin/env bash
# The project's GPU jobs side by side on one 4-GPU host (or two bars on a 2-GPU host: BAR01_GPUS=0 BAR_GPUS=1), in one
# command of at most ~9.5 minutes:
#   ab       benchmarks/gpu/ab_design.sh on GPUs 0,1 (its --gpus 0,1): the serving controls, one GPU per arm
#   abruns   benchmarks/gpu/ab_runs.sh on GPUs 2,3 (its GPUS=2,3, its own port range): the serving A/Bs
#            beside the A/A, read against it (not with tiers or onboard: they take GPUs 2,3)
#   abruns01 benchmarks/gpu/ab_runs.sh on GPUs 0,1 (cores 0-15, a third port range), in place of ab: two A/B
#            stages at once, e.g. dense here and mixtral on abruns
#   tiers    benchmarks/gpu/moe_tiers.sh on TIERS_GPUS (default 2): fused MoE's two tiers
#   onboard  benchmarks/gpu/onboard_run.sh on GPU 3: onboarding steps (ONBOARD_STEPS)
#   bar      benchmarks/gpu/moe_sglang_bar.sh on GPUs 2,3: SGLang's own fused MoE tuner beside the A/A (not with
#            abruns, tiers or onboard); its process sees only GPUs 2,3 (CUDA_VISIBLE_DEVICES), so that not even its
#            parent's CUDA context lands on an A/A arm's GPU
#   bar01    the same script on GPUs 0,1 (in place of ab or abruns01), with its own preset: two shapes' bars at once
# Each job runs on its own CPU cores where the host has 64 or more (ab 0-15, abruns 16-31, tiers 16-55, onboard
# 56-63, bar 16-63; with bar01, bar01 0-31 and bar 32-63), so that
# Triton's compile processes do not take the servers' host threads. The first job's set-up (the kit unpacked, the
# model's weights made) runs alone; the others start once it is done, because setup.sh copies the model folder
# anew and installs this checkout, and two at once race.
# Usage (repo root, 4-GPU machine, the SGLang kit carried as .stage):
#   ASTRA_COMMIT=<commit> bash benchmarks/gpu/host_split.sh OUTDIR
# env: JOBS ("ab tiers onboard"), DEADLINE (the wall of every job, 560 s)
#   ab:      AB_STAGES ("aa wrong"), AB_RUNS (an earlier OUTDIR/ab to go on from), PERIODS, ROUNDS, AB_DEADLINE (510)
#   abruns:  ABRUNS_STAGES ("mixtral"), ABRUNS_RUNS (an earlier OUTDIR/abruns), AA (the A/A's run folder: the parity
#            reference, e.g. benchmarks/results/2026-11-27-h200/serving/aa), ABRUNS_DEADLINE (510); PERIODS and
#            ROUNDS as ab's
#   abruns01: ABRUNS01_STAGES ("dense"), ABRUNS01_RUNS (an earlier OUTDIR/abruns01); AA, ABRUNS_DEADLINE, PERIODS
#            and ROUNDS as abruns's
#   tiers:   TIERS_GPUS (2), TIERS_RUNS (an earlier OUTDIR/tiers), SHAPES, BUCKETS, TIERS_DEADLINE (440), CORES (36)
#   onboard: ONBOARD_STEPS ("ops record optimize engage"), HOME_FROM (an earlier run's OUTDIR/onboard/home),
#            CONFIGS, FINAL_S
#   bar:     BAR_DEADLINE (440: its python part; the script adds its set-up and a 40 s kill margin), and the bar's
#            own variables passed through as they are (PRESET, BATCH_SIZES, MODE, TUNER_SHARE, WARM_SHARE, ...)
#   bar01:   BAR01_SCRIPT, BAR01_DEADLINE, and BAR01_<v> for v in PRESET BATCH_SIZES MODE TUNER_FROM TIERS_S
#            COLD_SAMPLE COLD_SECONDS TUNER_SHARE WARM_SHARE, in place of bar's (the rest shared), so that one job can
#            run SGLang's tuner on a shape while the other runs ours on another; its own Triton caches (WORK,
#            BAR_WORK) so that the two bars' compiles do not meet
#   BAR_GPUS (2,3), BAR01_GPUS (0,1): the GPUs each bar sees; on a 2-GPU host BAR01_GPUS=0 BAR_GPUS=1 runs two
#            shapes at once, a GPU each (below 64 cores nothing is pinned: each bar's tiers take their GPU share of
#            the cores, moe_tiers.sh)
#   AB_SCRIPT, ABRUNS_SCRIPT (both abruns jobs), TIERS_SCRIPT, ONBOARD_SCRIPT, BAR_SCRIPT: the scripts run (their CPU test swaps in stand-ins)
# Writes OUTDIR/<job>.tgz (the job's whole folder) and OUTDIR/<job>.console; prints each job's exit code and tail.
set -u
OUTDIR=$(realpath -m "${1:?usage: host_split.sh OUTDIR}"); mkdir -p "$OUTDIR"
WORKDIR=${WORKDIR:-$(mktemp -d /tmp/host-split.XXXX)}; mkdir -p "$WORKDIR"
JOBS=${JOBS:-"ab tiers onboard"}
DEADLINE=${DEADLINE:-560}
export ASTRA_COMMIT=${ASTRA_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
T0=$(date +%s)
elapsed() { echo $(( $(date +%s) - T0 )); }
has() { [[ " $JOBS " == *" $1 "* ]]; }

pin() {  # pin CORES CMD...: on its own cores where the host has enough of them
  local cores=$1; shift
  if [ "$(nproc)" -ge 64 ] && command -v taskset > /dev/null; then taskset -c "$cores" "$@"; else "$@"; fi
}
job() {  # job NAME CORES ENV... -- CMD...: the command under `env ENV...`, its console and exit code kept
  local name=$1 cores=$2; shift 2
  local vars=()
  while [ "$1" != "--" ]; do vars+=("$1"); shift; done
  shift
  echo "== $name at $(elapsed) s: ${vars[*]} $*"
  pin "$cores" env "${vars[@]}" timeout -k 15 "$DEADLINE" "$@" > "$WORKDIR/$name.console" 2>&1
  echo "$name exit code $? at $(elapsed) s" | tee -a "$WORKDIR/$name.console"
}

for pair in "abruns tiers 2,3" "abruns onboard 2,3" "bar abruns 2,3" "bar tiers 2,3" "bar onboard 2,3" \
            "ab abruns01 0,1" "ab bar01 0,1" "abruns01 bar01 0,1"; do
  set -- $pair  # abruns and bar take GPUs 2,3; tiers (default GPU 2) and onboard (GPU 3) would share one
  if has $1 && has $2; then
    echo "host_split.sh: JOBS has both $1 and $2, and both run on GPUs $3: choose one"; exit 2
  fi
done
overlap=$(comm -12 <(tr , '\n' <<< "${BAR_GPUS:-2,3}" | sort) <(tr , '\n' <<< "${BAR01_GPUS:-0,1}" | sort) | paste -sd,)
if has bar && has bar01 && [ -n "$overlap" ]; then
  echo "host_split.sh: bar (BAR_GPUS ${BAR_GPUS:-2,3}) and bar01 (BAR01_GPUS ${BAR01_GPUS:-0,1}) share GPU $overlap"
  exit 2
fi
set_up_first() {  # set_up_first NAME PID: the job's set-up alone first (see above)
  for _ in $(seq 1 150); do
    grep -q "model ready" "$WORKDIR/$1/console.txt" 2>/dev/null && break
    kill -0 "$2" 2>/dev/null || break
    sleep 2
  done
  echo "== $1 set up at $(elapsed) s"
}
stage_env() {  # stage_env NAME STAGES RUNS DEADLINE: the settings every serving job takes, into `envs`
  envs=("OUT=$WORKDIR/$1" "STAGES=$2" "DEADLINE=$4")
  [ -n "${PERIODS:-}" ] && envs+=("PERIODS=$PERIODS")
  [ -n "${ROUNDS:-}" ] && envs+=("ROUNDS=$ROUNDS")
  [ -n "$3" ] && envs+=("RUNS=$3")
  return 0
}
abruns_env() {  # abruns_env NAME GPUS PORT STAGES RUNS: ab_runs.sh's settings for one of the two abruns jobs
  # (no CUDA_VISIBLE_DEVICES: ab sets each server's from its --gpus)
  stage_env "$1" "$4" "$5" "${ABRUNS_DEADLINE:-510}"
  envs+=("GPUS=$2" "PORT=$3")
  [ -n "${AA:-}" ] && envs+=("AA=$AA")
  return 0
}
pids=()
if has ab; then
  stage_env ab "${AB_STAGES:-aa wrong}" "${AB_RUNS:-}" "${AB_DEADLINE:-510}"
  job ab 0-15 "${envs[@]}" -- bash "${AB_SCRIPT:-benchmarks/gpu/ab_design.sh}" &
  pids+=($!)
  set_up_first ab $!
fi
if has abruns01; then
  abruns_env abruns01 0,1 30333 "${ABRUNS01_STAGES:-dense}" "${ABRUNS01_RUNS:-}"
  job abruns01 0-15 "${envs[@]}" -- bash "${ABRUNS_SCRIPT:-benchmarks/gpu/ab_runs.sh}" &
  pids+=($!)
  set_up_first abruns01 $!
fi
if has abruns; then
  abruns_env abruns 2,3 30233 "${ABRUNS_STAGES:-mixtral}" "${ABRUNS_RUNS:-}"
  job abruns 16-31 "${envs[@]}" -- bash "${ABRUNS_SCRIPT:-benchmarks/gpu/ab_runs.sh}" &
  pids+=($!)
  sleep "${STAGGER:-10}"  # its set-up before the next one's
fi
if has tiers; then
  tiers_env=("GPUS=${TIERS_GPUS:-2}" "CORES=${CORES:-36}" "DEADLINE=${TIERS_DEADLINE:-440}")
  [ -n "${SHAPES:-}" ] && tiers_env+=("SHAPES=$SHAPES")
  [ -n "${BUCKETS:-}" ] && tiers_env+=("BUCKETS=$BUCKETS")
  [ -n "${TIERS_RUNS:-}" ] && tiers_env+=("RUNS=$TIERS_RUNS")
  job tiers 16-55 "${tiers_env[@]}" -- bash "${TIERS_SCRIPT:-benchmarks/gpu/moe_tiers.sh}" "$WORKDIR/tiers" &
  pids+=($!)
  sleep "${STAGGER:-10}"  # its set-up before the next one's
fi
if has onboard; then
  onboard_env=("CUDA_VISIBLE_DEVICES=3" "PORT=30177" "STEPS=${ONBOARD_STEPS:-ops record optimize engage}")
  [ -n "${HOME_FROM:-}" ] && onboard_env+=("HOME_FROM=$HOME_FROM")
  [ -n "${CONFIGS:-}" ] && onboard_env+=("CONFIGS=$CONFIGS")
  [ -n "${FINAL_S:-}" ] && onboard_env+=("FINAL_S=$FINAL_S")
  job onboard 56-63 "${onboard_env[@]}" -- bash "${ONBOARD_SCRIPT:-benchmarks/gpu/onboard_run.sh}" \
    "$WORKDIR/onboard" &
  pids+=($!)
fi
bar_cores=16-63
if has bar01; then
  bar01_env=("CUDA_VISIBLE_DEVICES=${BAR01_GPUS:-0,1}" "DEADLINE=${BAR01_DEADLINE:-${BAR_DEADLINE:-440}}"
             "WORK=/tmp/moe-tiers-work01" "BAR_WORK=/tmp/moe-bar-work01")
  for v in PRESET BATCH_SIZES MODE TUNER_FROM TIERS_S COLD_SAMPLE COLD_SECONDS TUNER_SHARE WARM_SHARE; do
    own=BAR01_$v
    [ -n "${!own+x}" ] && bar01_env+=("$v=${!own}")
  done
  # bar's TUNER_FROM names bar's shape: a bar01 of its own preset never takes it
  [ -n "${BAR01_PRESET+x}" ] && [ -z "${BAR01_TUNER_FROM+x}" ] && bar01_env+=("TUNER_FROM=")
  job bar01 0-31 "${bar01_env[@]}" -- bash "${BAR01_SCRIPT:-${BAR_SCRIPT:-benchmarks/gpu/moe_sglang_bar.sh}}" \
    "$WORKDIR/bar01" &
  pids+=($!)
  bar_cores=32-63
  sleep "${STAGGER:-20}"  # its set-up (this checkout installed) before the next one's
fi
if has bar; then
  job bar "$bar_cores" "CUDA_VISIBLE_DEVICES=${BAR_GPUS:-2,3}" "DEADLINE=${BAR_DEADLINE:-440}" -- \
    bash "${BAR_SCRIPT:-benchmarks/gpu/moe_sglang_bar.sh}" "$WORKDIR/bar" &
  pids+=($!)
fi
wait "${pids[@]}"
echo "== all jobs done at $(elapsed) s"
for name in $JOBS; do  # each archive on its own: one job's missing folder loses no other's
  [ -d "$WORKDIR/$name" ] && tar czf "$OUTDIR/$name.tgz" -C "$WORKDIR" "$name"
  [ -f "$WORKDIR/$name.console" ] && cp "$WORKDIR/$name.console" "$OUTDIR/" && tail -n "${TAIL:-25}" "$OUTDIR/$name.console"
done
ls -la "$OUTDIR"
