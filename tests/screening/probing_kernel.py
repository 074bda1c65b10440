"""A Triton kernel whose module probes the device when imported, as SGLang's FLA utils (imported with SGLang's
fused MoE kernels) do: it asks Triton's active driver for the backend and, told "cuda", asks torch for device 0.
In a process that sees no GPU, the probe falls back to the CPU unless a stand-in driver says "cuda" (then torch
raises: "No CUDA GPUs are available" where libcuda is present, "Torch not compiled with CUDA enabled" on a CPU
build)."""
import torch
import triton
import triton.language as tl


def _backend() -> str:
    try:
        return triton.runtime.driver.active.get_current_target().backend
    except BaseException:  # noqa: BLE001 - no driver: as FLA's utils, fall back to the CPU
        return "cpu"


DEVICE_NAME = torch.cuda.get_device_name(0) if _backend() == "cuda" else "cpu"


@triton.jit
def probed_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1, mask=mask)
