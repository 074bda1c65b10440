# Source on the GPU machine from the repo root. Makes the project importable there with no network:
# the SGLang runtime kit (carried as .stage/, see README) supplies pydantic, openai, sglang, sgl_kernel,
# flashinfer for Python 3.12 + torch 2.11; the project itself is installed editable without dependencies.
set -u
source .stage/device-setup.sh >/dev/null
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . 2>&1 | grep -v -i warning || true
export PATH=/usr/local/cuda/bin:$PATH ASTRA_SGLANG_CACHE=${ASTRA_SGLANG_CACHE:-/tmp/astra-cache}
python3 -c "import torch, astra_sglang; print('gpu', torch.cuda.get_device_name(), 'torch', torch.__version__)"
