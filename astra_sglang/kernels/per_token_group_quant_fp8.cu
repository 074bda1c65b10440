// per_token_group_quant_fp8: per token t and group g of group_size features, s = max(amax |x|, eps) / 448,
// x_q = fp8 e4m3 (saturating) of x / s, x_s[t, g] = s; x [T, H] bf16/fp16, x_q [T, H] e4m3, x_s fp32 [T, H/group].
// Baseline kernel (our own): one warp per (token, group), lanes stride over the group, IEEE division, any group
// size and any strides (x_s row- or column-major alike), no vectorization.
#include <cuda_fp8.h>
#include "astra_abi.h"
#include "astra_device.cuh"  // to_f

// Element strides of x (token, feature), x_q (token, feature) and x_s (token, group), passed by value.
struct Strides { int64_t v[6]; };

template <typename T>
__global__ void group_quant_kernel(const T* __restrict__ x, __nv_fp8_storage_t* __restrict__ xq, float* __restrict__ xs,
                                   int64_t tokens, int64_t groups, int64_t group, Strides st, float eps) {
  const int64_t x_t = st.v[0], x_f = st.v[1], q_t = st.v[2], q_f = st.v[3], s_t = st.v[4], s_g = st.v[5];
  const int lane = threadIdx.x % 32;
  for (int64_t w = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; w < tokens * groups;
       w += (int64_t)gridDim.x * (blockDim.x / 32)) {
    const int64_t t = w / groups, first = (w % groups) * group;
    float amax = 0.0f;
    for (int64_t j = lane; j < group; j += 32) amax = fmaxf(amax, fabsf(to_f(x[t * x_t + (first + j) * x_f])));
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float scale = fmaxf(amax, eps) / 448.0f;
    for (int64_t j = lane; j < group; j += 32) {
      const float v = fminf(fmaxf(to_f(x[t * x_t + (first + j) * x_f]) / scale, -448.0f), 448.0f);
      xq[t * q_t + (first + j) * q_f] = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
    }
    if (lane == 0) xs[t * s_t + (w % groups) * s_g] = scale;
  }
}

ASTRA_ENTRY {
  if (num_tensors != 3 || num_scalars < 2) return ASTRA_UNSUPPORTED;
  const AstraTensor &x = tensors[0], &q = tensors[1], &s = tensors[2];
  const int64_t group = (int64_t)scalars[0];
  if (group <= 0 || x.ndim != 2 || q.ndim != 2 || s.ndim != 2 || x.shape[1] % group != 0) return ASTRA_UNSUPPORTED;
  if (q.dtype != ASTRA_FLOAT8_E4M3 || s.dtype != ASTRA_FLOAT32) return ASTRA_UNSUPPORTED;
  const int64_t tokens = x.shape[0], groups = x.shape[1] / group;
  if (tokens * groups == 0) return ASTRA_OK;
  const Strides st = {{x.stride[0], x.stride[1], q.stride[0], q.stride[1], s.stride[0], s.stride[1]}};
  const int64_t warps = tokens * groups;
  const int blocks = (int)((warps + 7) / 8 < 65535 ? (warps + 7) / 8 : 65535);
  auto* xq = static_cast<__nv_fp8_storage_t*>(q.data);
  auto* xs = static_cast<float*>(s.data);
  if (x.dtype == ASTRA_BFLOAT16)
    group_quant_kernel<__nv_bfloat16><<<blocks, 256, 0, stream>>>(static_cast<const __nv_bfloat16*>(x.data), xq, xs,
                                                                 tokens, groups, group, st, (float)scalars[1]);
  else if (x.dtype == ASTRA_FLOAT16)
    group_quant_kernel<__half><<<blocks, 256, 0, stream>>>(static_cast<const __half*>(x.data), xq, xs, tokens, groups,
                                                         group, st, (float)scalars[1]);
  else
    return ASTRA_UNSUPPORTED;
  return (int)cudaGetLastError();
}
