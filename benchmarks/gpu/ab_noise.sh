#!/usr/bin/env bash
# How narrow can a serving A/B's interval get on this GPU? `astra-sglang ab --paired` with every noise control:
# both servers up at once (one start each, the second sized like the first: --max-total-tokens), counterbalanced
# rounds AB BA ..., a warm-up round, the same prompts every round (--seed), the idle server sleeping
# (--sleep-on-idle), nvidia-smi's clocks / temperature / throttle reasons around every benchmark, and rounds
# until the output-throughput interval is under 1% wide (--target-width 1) or the time runs out.
#   MODE=aa (default)  A/A control: B is a second unpatched server started the same way; the interval it reaches
#                      is the noise floor of the method
#   MODE=ab            the real A/B: B runs the shipped patches (`launch`'s path), same settings
# Load: the decode-heavy one (64 concurrent, 256 in / 512 out, PROMPTS=128 per benchmark), triton attention.
# Writes under OUT: ab.md, ab.jsonl, ab.png, settings-diff.json (what the two servers resolved differently),
# logs.tgz (server logs, /server_info of both), console.txt; prints a
# per-round table and the interval last.
#   PRESET=mixtral-8x7b  the model instead: a MoE architecture from benchmarks/make_moe_model.py (4 layers, dummy
#                      weights), served with SGLang's Triton MoE runner
#   PATCHES=DIR        B's patches instead of the shipped ones (e.g. a fused_moe config patch from `astra-sglang tune`)
#   B_FIRST=1          B's server starts first (--b-first): whether an A/A offset follows the start order
# Usage (repo root, GPU machine, .stage carried): OUT=/path [MODE=aa|ab] [PRESET=..] [PATCHES=..] bash benchmarks/gpu/ab_noise.sh
# Two server starts (the first on a fresh machine 90-180 s) and ~25-35 s a round: ~7-8 minutes with the timeout.
set -u
OUT=${OUT:?set OUT}; mkdir -p "$OUT"
MODE=${MODE:-aa}; PORT=${PORT:-30133}; WORK=/tmp/astra-ab-noise
exec > >(tee "$OUT/console.txt") 2>&1
source benchmarks/gpu/setup.sh

stop_servers() {  # ab stops both servers itself; this catches any left by a kill, by their ports
  for p in "$PORT" $((PORT + 1)); do
    for pid in $(pgrep -f "sglang.launch_server.*--port $p" || true); do
      pgid=$(ps -o pgid= -p "$pid" | tr -d ' ')
      [ -n "$pgid" ] && kill -9 -- "-$pgid" 2>/dev/null
    done
  done
}
trap stop_servers EXIT
rm -rf "$WORK" && mkdir -p "$WORK"
MODEL=/tmp/model; model_flags=()
if [ -n "${PRESET:-}" ]; then
  MODEL=/tmp/model-$PRESET && python3 benchmarks/make_moe_model.py "$MODEL" --layers 4 --preset "$PRESET"
  model_flags=(--moe-runner-backend triton)
fi
arm_flag="--control"
if [ "$MODE" = ab ] && [ -n "${PATCHES:-}" ]; then
  arm_flag="--patches $WORK/patches" && cp -r "$PATCHES" "$WORK/patches"
elif [ "$MODE" = ab ]; then
  arm_flag="--patches $WORK/patches" && cp -r patches "$WORK/patches"
  astra-sglang patch disable merge_attn_states_lse --patches "$WORK/patches"  # FA3 is not in the runtime kit
fi
timeout -k 20 ${AB_TIMEOUT:-440} astra-sglang ab --model-path "$MODEL" --load-format dummy --paired $arm_flag \
  ${B_FIRST:+--b-first} --runs ${RUNS:-30} --target-width ${WIDTH:-1} --warmup 1 --seed 1 --port "$PORT" \
  --num-prompts ${PROMPTS:-128} --input-len 256 --output-len 512 --concurrency 64 --out "$WORK/ab" -- \
  --attention-backend triton --sampling-backend pytorch --grammar-backend none --cuda-graph-max-bs-decode 64 \
  --mem-fraction-static 0.4 --max-total-tokens ${MAX_TOTAL_TOKENS:-200000} --sleep-on-idle "${model_flags[@]}"
echo "exit code $?"
cp "$WORK"/ab/ab.{md,jsonl,png} "$WORK"/ab/settings-diff.json "$OUT/" 2>/dev/null
tar -czf "$OUT/logs.tgz" -C "$WORK/ab" $(cd "$WORK/ab" && ls *.log server-info-*.json 2>/dev/null) 2>/dev/null
python3 - "$WORK/ab/ab.jsonl" "$MODE" <<'EOF'
import json, sys
from astra_sglang.serving import paired_stats
rows = [json.loads(line) for line in open(sys.argv[1])] if __import__("os").path.exists(sys.argv[1]) else []
print(f"{'A/A control' if sys.argv[2] == 'aa' else 'A/B (patched B)'}: {len({r['run'] for r in rows})} rounds")
print("round order  A tok/s   B tok/s   B vs A   SM MHz before A/B")
for run, order, a, b in paired_stats.round_values(rows, "output_throughput"):
    sm = {r["arm"]: ((r.get("gpu") or {}).get("before") or {}).get("sm_mhz") for r in rows if r["run"] == run}
    print(f"{run:5} {order:5} {a:8.0f}  {b:8.0f}  {(b - a) / a * 100:+6.2f}%  {sm.get('A')}/{sm.get('B')}")
for key, label, unit, higher in (("output_throughput", "output throughput", "tok/s", True),
                                 ("mean_itl_ms", "mean ITL", "ms", False), ("mean_ttft_ms", "mean TTFT", "ms", False)):
    c = paired_stats.paired_change(rows, key, label, unit, higher)
    if c and c.lo is not None:
        print(f"{label}: median {c.median_pct:+.2f}%, 95% interval [{c.lo:+.2f}, {c.hi:+.2f}]% "
              f"(width {c.hi - c.lo:.2f}%), {c.n} rounds")
EOF
