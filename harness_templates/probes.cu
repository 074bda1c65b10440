// Measurement probes built by the harness next to every evaluation (same nvcc, same flags):
//  - an SM copy kernel: the bandwidth roofline (a captured cudaMemcpy node uses the copy engine, which
//    is slower than SMs on H100/H200, so it would understate the roofline);
//  - an empty kernel, plain and with programmatic dependent launch (PDL): the per-launch floor inside a
//    CUDA graph. With PDL a launch starts while the one before it drains, so back-to-back PDL launches
//    cost less each than plain ones (0.80 vs 0.97 us for a tiny silu_and_mul and the empty kernel on an
//    H100, 2026-11-24): the floor is the cheaper of the two.
#include <cuda_runtime.h>
#include <stdint.h>

// Four independent 16-byte loads in flight per thread before the stores: one load per iteration left the
// copy ~9% under the bandwidth a well-pipelined copy reaches (3.9 vs 4.3 TB/s on an H200, 2026-11-21).
__global__ void astra_probe_copy_kernel(const int4* __restrict__ src, int4* __restrict__ dst, int64_t n) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    int4 a = src[i], b = src[i + stride], c = src[i + 2 * stride], d = src[i + 3 * stride];
    dst[i] = a, dst[i + stride] = b, dst[i + 2 * stride] = c, dst[i + 3 * stride] = d;
  }
  for (; i < n; i += stride) dst[i] = src[i];
}

__global__ void astra_probe_empty_kernel() {}

__global__ void astra_probe_empty_pdl_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

extern "C" int astra_probe_copy(void* dst, const void* src, int64_t bytes, int num_sms, cudaStream_t stream) {
  int64_t n = bytes / 16;  // callers pass 16-byte multiples
  astra_probe_copy_kernel<<<num_sms * 4, 1024, 0, stream>>>((const int4*)src, (int4*)dst, n);
  return (int)cudaGetLastError();
}

extern "C" int astra_probe_empty(cudaStream_t stream) {
  astra_probe_empty_kernel<<<1, 32, 0, stream>>>();
  return (int)cudaGetLastError();
}

extern "C" int astra_probe_empty_pdl(cudaStream_t stream) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(1);
  cfg.blockDim = dim3(32);
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  const cudaError_t err = cudaLaunchKernelEx(&cfg, astra_probe_empty_pdl_kernel);
  return err == cudaSuccess ? (int)cudaGetLastError() : (int)err;
}
