# Sourced by the serving A/B scripts (ab_design.sh, ab_runs.sh) on a GPU machine, from the repo root: the SGLang
# kit and this checkout (setup.sh), the console copied to $OUT/console.txt, the model with random weights of a
# trained model's scale (benchmarks/make_weights.py; made once per machine), the client both scripts pin, the
# elapsed-time helper, and a trap that ends any server a stage left behind (by the ports the scripts use, never by
# name alone).
set -u
OUT=${OUT:?set OUT}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
exec > >(tee -a "$OUT/console.txt") 2>&1
BEGIN=$(date +%s)
elapsed() { echo $(( $(date +%s) - BEGIN )); }
source benchmarks/gpu/setup.sh
PORT=${PORT:-30133}
source benchmarks/gpu/server_args.sh  # SERVER_ARGS, and ONE_SERVER for the one-request stages
MODEL=/tmp/model-weights

# The client of every round (warm-up included) and every stage, so that an A/B reads against the A/A of the same
# load. A timed window of about 12 s or more on the kit's 8-layer Llama-3-8B shape (ab's --min-window is 10 s): on
# 4x NVIDIA H200 (2026-11-27, commit 45b7284) 64 prompts x 128 out at 32 concurrent gave windows of 0.51-1.13 s at
# 8.0k-16.0k output tok/s, and a mean ITL of 1.54-2.29 ms; 1.54 ms bounds a full batch's steady rate at
# 32 / 1.54 ms = 20.8k tok/s. 1024 prompts x 256 out = 262,144 output tokens: 12.6 s at that bound, 16.4 s at 16.0k,
# 23.8 s at 11.0k (an H100, slower per step, longer). Concurrency stays 32: the H200's figures are at 32, and at 64
# its rate is unmeasured (up to 64 / 1.54 ms = 41.6k tok/s), so no prompt count would bound the window there.
# Each arm's rounds run in one long-lived client per call (serving/bench_clients.py): the client's start, 18-30 s
# of every round there (the rounds' 19-31 s of wall less their windows), is paid once, while the first servers
# start. A round is then its window plus the benchmark's own ~2 s (its 1 s pause after its warm-up request, that
# request, the prompts drawn, the outputs retokenized: an estimate from its code, not yet measured; the console
# prints each round's client wall): ~15-26 s.
PROMPTS=${PROMPTS:-1024}
ROUNDS=${ROUNDS:-3}
CLIENT=(--num-prompts "$PROMPTS" --input-len "${IN:-128}" --output-len "${OUT_LEN:-256}"
        --concurrency "${CONC:-32}" --warmup-requests 1 --seed 1)
if [ ! -f "$MODEL/model.safetensors" ]; then
  python3 benchmarks/make_weights.py /tmp/model "$MODEL" --device cuda || exit 1
fi
echo "== model ready at $(elapsed) s"

stop_servers() {  # `ab` stops its servers itself; this catches any left by a kill, by their ports
  for p in $(seq "$PORT" $((PORT + 9))); do
    for pid in $(pgrep -f "sglang.launch_server.*--port $p( |$)" || true); do
      pgid=$(ps -o pgid= -p "$pid" | tr -d ' ')
      [ -n "$pgid" ] && kill -9 -- "-$pgid" 2>/dev/null
    done
  done
}
trap stop_servers EXIT

# A run folder an earlier call left (its OUT/<name>, carried back in under work/): copied into OUT to go on. Every
# stage that marks (mark_started) calls it first; its stamp tells the periods this call ran from the copied ones.
resume_from() {  # resume_from NAME
  local src=${RUNS:-}/$1
  if [ -n "${RUNS:-}" ] && [ -f "$src/plan.json" ] && [ ! -f "$OUT/$1/plan.json" ]; then
    mkdir -p "$OUT/$1" && cp -r "$src/." "$OUT/$1/" && echo "== $1: continuing the run from $src"
  fi
  touch "$(began_mark "$1")"
}

# A call's first period starts its two servers one after the other (ab's default): on a fresh machine the first
# start JIT-compiles kernels into cache folders the second would share (113 s and 67 s on the H200 of 2026-11-27,
# SGLang's prefill CUDA-graph capture 55.9 s against 4.5 s). Once a period of a model has run on this machine those
# caches are filled, so later stages and calls start both at once (--no-stagger): one start (~50 s) less, and a
# period the stop rule can count on. The mark lives in /tmp, as long as the caches and the weights.
started_mark() { echo "${AB_MARKS:-/tmp}/astra-ab-started-$(basename "$1")"; }
began_mark() { echo "${AB_MARKS:-/tmp}/astra-ab-began-$1"; }
stagger_opts() {  # stagger_opts MODEL: --no-stagger where a period of MODEL has run on this machine
  if [ -f "$(started_mark "$1")" ]; then echo --no-stagger; fi
}
# A period's starts are appended to starts.jsonl when it completes: a file newer than the stage's start holds one
# this call ran. A resumed folder's rows, copied in before, ran on the machine of an earlier call.
mark_started() {  # mark_started MODEL RUN_DIR: after a stage, if a period of it completed in this call
  if [ "$2/starts.jsonl" -nt "$(began_mark "$(basename "$2")")" ]; then touch "$(started_mark "$1")"; fi
}

# The A/A rule and the interval of a finished stage, one line each (from its summary.json).
report_line() {  # report_line DIR
  python3 - "$1" <<'EOF'
import json, sys
from pathlib import Path
path = Path(sys.argv[1]) / "summary.json"
if not path.is_file():
    sys.exit(print(f"{sys.argv[1]}: no summary"))
s = json.loads(path.read_text())
for m in s["metrics"]:
    print(f"{Path(sys.argv[1]).name} {m['label']}: typical {m['typical_pct']:+.2f}%, "
          + (f"[{m['lo']:+.2f}, {m['hi']:+.2f}]% ({m['interval']})" if m["lo"] is not None else "no interval")
          + f": {m['verdict']}")
if s.get("short_windows"):
    print(f"{Path(sys.argv[1]).name} timed windows: {s['short_windows']}")
if s.get("aa_ok") is not None:
    print(f"{Path(sys.argv[1]).name} A/A rule: {'pass' if s['aa_ok'] else 'fail: ' + '; '.join(s['aa_reasons'])}")
if s.get("parity"):
    print(f"{Path(sys.argv[1]).name} parity ({s['parity']['reference']}): {'ok' if s['parity']['ok'] else 'FAIL'}")
    print("\n".join("  " + line for line in s["parity"]["lines"]))
EOF
}
