# Source from the repo root on a GPU machine: makes this checkout importable (editable, no dependencies, no
# network) and nvcc reachable. Where SGLang is not installed, an SGLang runtime kit unpacked as .stage/ stands
# in for it: its device-setup.sh puts SGLang 0.5.17, sgl_kernel, flashinfer, pydantic and openai for
# Python 3.12 + torch 2.11 on the path. A script started by one that already set up this checkout (moe_ours_vs_bar.sh
# runs moe_tiers.sh and moe_sglang_bar.sh) inherits its environment and skips the kit and the install: one set-up
# per command, not three (10-20 s each).
set -u
if [ "${ASTRA_SETUP_DONE:-}" != "$PWD" ]; then
  if [ -f .stage/device-setup.sh ]; then source .stage/device-setup.sh >/dev/null; fi
  python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . 2>&1 | grep -v -i warning || true
  export ASTRA_SETUP_DONE=$PWD
fi
export PATH=/usr/local/cuda/bin:$PATH ASTRA_SGLANG_CACHE=${ASTRA_SGLANG_CACHE:-/tmp/astra-cache}
python3 -c "import torch, astra_sglang; print('gpu', torch.cuda.get_device_name(), 'torch', torch.__version__)"
