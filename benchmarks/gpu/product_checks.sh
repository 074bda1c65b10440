#!/usr/bin/env bash
# One GPU command for the product commands that replaced benchmark scripts: `bench OP --per-call` (the patched
# op's eager call against SGLang's), `bench OP --ncu` (Nsight Compute, patch vs SGLang's op), `patch verify OP
# --sanitize` (compute-sanitizer memcheck and racecheck), and the wheel: built from this tree, installed into a
# fresh venv, `patch verify` run from it outside the checkout. About 6 minutes on an H100 (builds cached after
# the first op).
# Usage (GPU machine, repo root; .stage/ unpacked as setup.sh expects): bash benchmarks/gpu/product_checks.sh OUTDIR [OP]
# Writes OUTDIR/{per_call,ncu}/ and OUTDIR/log.txt; prints each step's exit code and result lines.
set -u
OUTDIR=$(realpath -m "${1:?output dir}")
OP=${2:-rmsnorm}
mkdir -p "$OUTDIR"
source benchmarks/gpu/setup.sh
LOG=$OUTDIR/log.txt
run() {  # run SECONDS NAME CMD...: the command's output to the log, its exit code and last lines to stdout
  local limit=$1 name=$2; shift 2
  echo "== $name: $*" | tee -a "$LOG"
  timeout -k 10 "$limit" "$@" >> "$LOG" 2>&1
  echo "$name exit code $?"
  tail -4 "$LOG"
}
run 150 per-call python3 -m astra_sglang.cli bench "$OP" --per-call --out "$OUTDIR/per_call"
run 150 ncu python3 -m astra_sglang.cli bench "$OP" --ncu --shapes 1x4096,8192x4096 --out "$OUTDIR/ncu"
run 200 sanitize python3 -m astra_sglang.cli patch verify "$OP" --no-time --sanitize
# The wheel: its own copy of the package and data, torch and SGLang from this environment (a path file, not
# --system-site-packages: that would run the editable install's hook and import this checkout instead).
WHEEL=$(mktemp -d)
python3 -m pip wheel -q --no-deps --no-build-isolation --no-index -w "$WHEEL/dist" . >> "$LOG" 2>&1
python3 -m venv --without-pip "$WHEEL/venv"
SITE=$("$WHEEL/venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
python3 -c "import site, sys; print('\n'.join(p for p in [*site.getsitepackages(), *sys.path] if p.endswith('-packages')))" \
  > "$SITE/outer-environment.pth"
python3 -m pip --python "$WHEEL/venv/bin/python" install -q --no-deps --no-index "$WHEEL"/dist/*.whl >> "$LOG" 2>&1
cd "$WHEEL"  # outside the checkout: the package must come from the wheel (the first line says where from)
run 30 wheel-import "$WHEEL/venv/bin/python" -c "import astra_sglang; print(astra_sglang.__file__)"
run 200 wheel-verify "$WHEEL/venv/bin/astra-sglang" patch verify "$OP" --shapes quick
cd - > /dev/null
rm -rf "$WHEEL"
