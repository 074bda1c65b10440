// merge_attn_states_lse (SGLang merge_state_v2): merge two partial attention states by their
// natural-log LSEs. v_* [tokens, heads, head_dim] of T, s_* fp32 [tokens, heads]:
//   m = max(s_a, s_b); w_x = exp(s_x - m); v = (w_a v_a + w_b v_b) / (w_a + w_b); s = m + log(w_a + w_b).
// A ±inf LSE marks an empty partial state (treated as -inf); both empty -> v = 0, s = -inf (no NaN).
// Tensors (spec order): v_a, s_a, v_b, s_b, v_merged (out), s_merged (out); no scalars.
// Baseline kernel (our own): one warp per (token, head) pair (grid-stride over pairs), lanes stride
// over head_dim so loads are coalesced; fp32 math, expf/logf; any head_dim works. Fully contiguous only.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include "astra_abi.h"

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ float from_f<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_f<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

constexpr int kThreads = 256;

template <typename T>
__global__ void merge_kernel(const T* __restrict__ va, const float* __restrict__ sa, const T* __restrict__ vb,
                             const float* __restrict__ sb, T* __restrict__ vo, float* __restrict__ so, int64_t pairs,
                             int64_t head_dim) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = (int64_t)gridDim.x * (kThreads / 32);
  for (int64_t p = (int64_t)blockIdx.x * (kThreads / 32) + threadIdx.x / 32; p < pairs; p += warps) {
    const float a = isinf(sa[p]) ? -INFINITY : sa[p];
    const float b = isinf(sb[p]) ? -INFINITY : sb[p];
    const float m = fmaxf(a, b);
    const int64_t base = p * head_dim;
    if (m == -INFINITY) {  // both states empty: defined as 0 / -inf instead of 0/0
      for (int64_t j = lane; j < head_dim; j += 32) vo[base + j] = from_f<T>(0.0f);
      if (lane == 0) so[p] = -INFINITY;
      continue;
    }
    const float wa = expf(a - m), wb = expf(b - m);  // exp(-inf) = 0 drops an empty state
    const float total = wa + wb;                     // >= 1: the max term is exp(0)
    const float ca = wa / total, cb = wb / total;
    for (int64_t j = lane; j < head_dim; j += 32)
      vo[base + j] = from_f<T>(to_f(va[base + j]) * ca + to_f(vb[base + j]) * cb);
    if (lane == 0) so[p] = m + logf(total);
  }
}

template <typename T>
static int launch(const AstraTensor* t, int64_t pairs, int64_t head_dim, cudaStream_t stream) {
  const int64_t blocks_needed = (pairs + kThreads / 32 - 1) / (kThreads / 32);
  const int blocks = blocks_needed < 65535 * 8 ? (int)blocks_needed : 65535 * 8;
  merge_kernel<T><<<blocks, kThreads, 0, stream>>>(
      static_cast<const T*>(t[0].data), static_cast<const float*>(t[1].data), static_cast<const T*>(t[2].data),
      static_cast<const float*>(t[3].data), static_cast<T*>(t[4].data), static_cast<float*>(t[5].data), pairs, head_dim);
  return (int)cudaGetLastError();
}

// Row-major contiguous, ignoring the strides of size-1 dims (torch does the same).
static bool contiguous(const AstraTensor& x) {
  int64_t expect = 1;
  for (int i = x.ndim - 1; i >= 0; --i) {
    if (x.shape[i] != 1 && x.stride[i] != expect) return false;
    expect *= x.shape[i];
  }
  return true;
}

ASTRA_ENTRY {
  (void)scalars;
  if (num_tensors != 6 || num_scalars != 0) return ASTRA_UNSUPPORTED;
  const AstraTensor& v = tensors[0];
  if (v.ndim != 3) return ASTRA_UNSUPPORTED;
  for (int i : {0, 2, 4}) {  // values: same dtype and shape as v_a
    const AstraTensor& x = tensors[i];
    if (x.ndim != 3 || x.dtype != v.dtype || !contiguous(x)) return ASTRA_UNSUPPORTED;
    if (x.shape[0] != v.shape[0] || x.shape[1] != v.shape[1] || x.shape[2] != v.shape[2]) return ASTRA_UNSUPPORTED;
  }
  for (int i : {1, 3, 5}) {  // LSEs: fp32 [tokens, heads]
    const AstraTensor& x = tensors[i];
    if (x.ndim != 2 || x.dtype != ASTRA_FLOAT32 || !contiguous(x)) return ASTRA_UNSUPPORTED;
    if (x.shape[0] != v.shape[0] || x.shape[1] != v.shape[1]) return ASTRA_UNSUPPORTED;
  }
  const int64_t pairs = v.shape[0] * v.shape[1], head_dim = v.shape[2];
  if (pairs == 0) return ASTRA_OK;  // nothing to do: launch nothing
  switch (v.dtype) {
    case ASTRA_FLOAT32: return launch<float>(tensors, pairs, head_dim, stream);
    case ASTRA_FLOAT16: return launch<__half>(tensors, pairs, head_dim, stream);
    case ASTRA_BFLOAT16: return launch<__nv_bfloat16>(tensors, pairs, head_dim, stream);
    default: return ASTRA_UNSUPPORTED;
  }
}
