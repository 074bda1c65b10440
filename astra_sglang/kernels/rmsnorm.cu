// rmsnorm: out[t, :] = input[t, :] * rsqrt(mean(input[t, :]^2) + eps) * weight.
// Tensors (spec order): input [T, d], weight [d], out [T, d]; scalars: eps.
// Baseline kernel (our own): one block per row (grid-stride over rows); pass 1 accumulates the sum of
// squares in fp32 and reduces it across the block with warp shuffles, pass 2 re-reads the row (from L2)
// and writes the result. No vectorization, so any d (including 1 and odd) and any row stride work.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include "astra_abi.h"

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ float from_f<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_f<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the total.
__device__ __forceinline__ float block_sum(float v, float* smem /* [33] */) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nwarps = blockDim.x / 32;
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < nwarps ? smem[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) smem[32] = v;
  }
  __syncthreads();
  v = smem[32];
  __syncthreads();  // smem is reused by the next row
  return v;
}

// The weight as float; ASTRA_GEMMA=1 applies it as 1 + weight (SGLang's GemmaRMSNorm):
// gemma_rmsnorm's first kernel is this file built so.
#ifndef ASTRA_GEMMA
#define ASTRA_GEMMA 0
#endif
template <typename T> __device__ __forceinline__ float weight(T w) { return ASTRA_GEMMA ? 1.0f + to_f(w) : to_f(w); }

template <typename T>
__global__ void rmsnorm_kernel(const T* __restrict__ in, const T* __restrict__ w, T* __restrict__ out, int64_t rows,
                               int64_t d, int64_t in_stride, int64_t out_stride, float eps) {
  __shared__ float smem[33];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* x = in + r * in_stride;
    T* o = out + r * out_stride;
    float ss = 0.0f;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      float v = to_f(x[j]);
      ss += v * v;
    }
    const float rstd = rsqrtf(block_sum(ss, smem) / (float)d + eps);
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) o[j] = from_f<T>(to_f(x[j]) * rstd * weight(w[j]));
  }
}

template <typename T>
static int launch(const AstraTensor& in, const AstraTensor& w, const AstraTensor& out, float eps, cudaStream_t stream) {
  const int64_t rows = in.shape[0], d = in.shape[1];
  const int threads = d >= 1024 ? 1024 : (int)((d + 31) / 32 * 32);  // whole warps (block_sum needs them)
  const int blocks = rows < 65535 ? (int)rows : 65535;
  rmsnorm_kernel<T><<<blocks, threads, 0, stream>>>(static_cast<const T*>(in.data), static_cast<const T*>(w.data),
                                                    static_cast<T*>(out.data), rows, d, in.stride[0], out.stride[0], eps);
  return (int)cudaGetLastError();
}

ASTRA_ENTRY {
  if (num_tensors != 3 || num_scalars != 1) return ASTRA_UNSUPPORTED;
  const AstraTensor& in = tensors[0];
  const AstraTensor& w = tensors[1];
  const AstraTensor& out = tensors[2];
  if (in.ndim != 2 || out.ndim != 2 || w.ndim != 1) return ASTRA_UNSUPPORTED;
  if (in.dtype != w.dtype || in.dtype != out.dtype) return ASTRA_UNSUPPORTED;
  if (out.shape[0] != in.shape[0] || out.shape[1] != in.shape[1] || w.shape[0] != in.shape[1]) return ASTRA_UNSUPPORTED;
  // Last dims must be dense (a size-1 dim's stride is meaningless); rows may have any stride.
  if (in.shape[1] > 1 && (in.stride[1] != 1 || out.stride[1] != 1 || w.stride[0] != 1)) return ASTRA_UNSUPPORTED;
  if (in.shape[0] == 0 || in.shape[1] == 0) return ASTRA_OK;  // empty output: launch nothing
  const float eps = (float)scalars[0];
  switch (in.dtype) {
    case ASTRA_FLOAT32: return launch<float>(in, w, out, eps, stream);
    case ASTRA_FLOAT16: return launch<__half>(in, w, out, eps, stream);
    case ASTRA_BFLOAT16: return launch<__nv_bfloat16>(in, w, out, eps, stream);
    default: return ASTRA_UNSUPPORTED;
  }
}
