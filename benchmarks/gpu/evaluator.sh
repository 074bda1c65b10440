#!/usr/bin/env bash
# One GPU command for the evaluator: every rejection fixture on the GPU (tests/evaluator/test_gpu_fixtures.py),
# then the cost of one evaluation and the shipped kernels' figures with this tree's evaluator against an
# earlier tree's, same GPU, alternating which runs first, against SGLang's own ops (quick shapes, bf16).
# Usage (GPU machine, repo root; .stage/ unpacked (setup.sh), and the earlier package tree as .old/astra_sglang made with
#   mkdir .old && git archive REV astra_sglang | tar -x -C .old):
#   bash benchmarks/gpu/evaluator.sh OUTDIR [fixtures] [cost]     (both steps when none is named)
# Prints the fixture tests' summary and a table: per op, seconds per evaluation and speedups, old vs new.
set -u
OUTDIR=${1:?output dir}
shift
STEPS=${*:-fixtures cost}
mkdir -p "$OUTDIR"
source benchmarks/gpu/setup.sh
export ASTRA_SGLANG_CACHE=/tmp/astra-cache
OPS="silu_and_mul fused_add_rmsnorm rmsnorm merge_attn_states_lse"
LOG=$OUTDIR/log.txt
bench() {  # bench SECONDS TREE OP JSONL [extra args]: TREE=new (this checkout) or old (.old)
  local limit=$1 tree=$2 op=$3 out=$4 path=$PYTHONPATH; shift 4
  [ "$tree" = old ] && path=$PWD/.old${PYTHONPATH:+:$PYTHONPATH}
  echo "-- $tree $op $*" >> "$LOG"
  PYTHONPATH=$path timeout "$limit" python3 -m astra_sglang.cli bench "$op" --candidate "patches/$op/kernel.cu" \
    --baseline sglang --dtypes bf16 --out "$out" "$@" >> "$LOG" 2>&1
}
if [[ $STEPS == *fixtures* ]]; then
  echo "== fixtures"  # the acceptance test of this evaluator
  timeout 540 python3 -m pytest -v -p no:cacheprovider --timeout 240 --durations 0 tests/evaluator/test_gpu_fixtures.py \
    > "$OUTDIR/fixtures.txt" 2>&1
  grep -E "PASSED|FAILED|ERROR|SKIPPED|passed|failed|[0-9.]+s call" "$OUTDIR/fixtures.txt" | tail -40
fi
[[ $STEPS == *cost* ]] || exit 0
echo "== warm-up: builds and SGLang's JIT kernels, outside the measured runs"
for op in $OPS; do  # in parallel: the JIT compiles and builds are CPU work; nothing here is measured
  shape=1x4096; [ "$op" = merge_attn_states_lse ] && shape=1x32x128
  bench 150 new "$op" "/tmp/warmup-$op.jsonl" --shapes "$shape" --no-check &
done
wait
echo "== cost and figures: old vs new, alternating which goes first"
order="old new"
for op in $OPS; do
  for tree in $order; do bench 150 "$tree" "$op" "$OUTDIR/cost-$tree.jsonl" --shapes quick; done
  [ "$order" = "old new" ] && order="new old" || order="old new"
done
python3 - "$OUTDIR" <<'PY'
import json, statistics, sys
from pathlib import Path
out = Path(sys.argv[1])
rows = {}
for tree in ("old", "new"):
    path = out / f"cost-{tree}.jsonl"
    for line in path.read_text().splitlines() if path.exists() else []:
        r = json.loads(line)
        if r["type"] == "summary":
            rows.setdefault((r["kernel"], tree), {"wall": [], "speed": {}})["wall"].append(r["wall_s"])
        elif r.get("speedup"):
            rows.setdefault((r["kernel"], tree), {"wall": [], "speed": {}})["speed"].setdefault(
                "x".join(map(str, r["shape"])), []).append(r["speedup"])
print(f"{'op':24} {'tree':4} {'s/eval (each)':24} speedups per shape (each run)")
for (op, tree), v in sorted(rows.items()):
    speeds = " ".join(f"{k}:" + "/".join(f"{x:.3f}" for x in xs) for k, xs in v["speed"].items())
    print(f"{op:24} {tree:4} {' '.join(f'{w:.1f}' for w in v['wall']):24} {speeds}")
PY
