// Measurement probes built by the harness next to every evaluation (same nvcc, same flags):
//  - an SM copy kernel: the bandwidth roofline (a captured cudaMemcpy node uses the copy engine, which
//    is slower than SMs on H100/H200, so it would understate the roofline);
//  - an empty kernel: the per-launch floor inside a CUDA graph.
#include <cuda_runtime.h>
#include <stdint.h>

__global__ void astra_probe_copy_kernel(const int4* __restrict__ src, int4* __restrict__ dst, int64_t n) {
  int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) dst[i] = src[i];
}

__global__ void astra_probe_empty_kernel() {}

extern "C" int astra_probe_copy(void* dst, const void* src, int64_t bytes, int num_sms, cudaStream_t stream) {
  int64_t n = bytes / 16;  // callers pass 16-byte multiples
  astra_probe_copy_kernel<<<num_sms * 8, 512, 0, stream>>>((const int4*)src, (int4*)dst, n);
  return (int)cudaGetLastError();
}

extern "C" int astra_probe_empty(cudaStream_t stream) {
  astra_probe_empty_kernel<<<1, 32, 0, stream>>>();
  return (int)cudaGetLastError();
}
