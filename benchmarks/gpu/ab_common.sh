# Sourced by the serving A/B scripts (ab_design.sh, ab_runs.sh) on a GPU machine, from the repo root: the SGLang
# kit and this checkout (setup.sh), the console copied to $OUT/console.txt, the model with random weights of a
# trained model's scale (benchmarks/make_weights.py; made once per machine), the elapsed-time helper, and a trap
# that ends any server a stage left behind (by the ports the scripts use, never by name alone).
set -u
OUT=${OUT:?set OUT}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
exec > >(tee -a "$OUT/console.txt") 2>&1
BEGIN=$(date +%s)
elapsed() { echo $(( $(date +%s) - BEGIN )); }
source benchmarks/gpu/setup.sh
PORT=${PORT:-30133}
SERVER_ARGS=(--attention-backend triton --sampling-backend pytorch --grammar-backend none
             --cuda-graph-max-bs-decode 64)
MODEL=/tmp/model-weights
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

# A run folder an earlier call left (its OUT/<name>, carried back in under work/): copied into OUT to go on.
resume_from() {  # resume_from NAME
  local src=${RUNS:-}/$1
  if [ -n "${RUNS:-}" ] && [ -f "$src/plan.json" ] && [ ! -f "$OUT/$1/plan.json" ]; then
    mkdir -p "$OUT/$1" && cp -r "$src/." "$OUT/$1/" && echo "== $1: continuing the run from $src"
  fi
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
if s.get("aa_ok") is not None:
    print(f"{Path(sys.argv[1]).name} A/A rule: {'pass' if s['aa_ok'] else 'fail: ' + '; '.join(s['aa_reasons'])}")
if s.get("parity"):
    print(f"{Path(sys.argv[1]).name} parity ({s['parity']['reference']}): {'ok' if s['parity']['ok'] else 'FAIL'}")
    print("\n".join("  " + line for line in s["parity"]["lines"]))
EOF
}
