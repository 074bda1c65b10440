// topk_softmax: topk_weights[t, :], topk_ids[t, :] = the top-k of softmax(gating_output[t, :]) (descending,
// lowest expert id first among equal weights), divided by their sum when `renormalize`.
// Tensors (spec order): topk_weights [T, k] fp32, topk_ids [T, k] int32, gating_output [T, E]; scalar: renormalize.
// Baseline kernel (our own): one thread per token, three passes over its row (max, sum of exp, k argmax passes
// that skip the experts already picked), fp32 math as SGLang's. Any E, any k <= E, any row stride; no
// vectorization and no shared memory: plainly correct rather than fast.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include "astra_abi.h"

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
__global__ void topk_softmax_rows(float* weights, int32_t* ids, const T* gating, int64_t tokens, int experts, int k,
                                  bool renormalize, int64_t w_stride, int64_t id_stride, int64_t g_stride) {
  const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= tokens) return;
  const T* x = gating + t * g_stride;
  float* w = weights + t * w_stride;
  int32_t* id = ids + t * id_stride;
  float mx = -INFINITY;
  for (int e = 0; e < experts; ++e) mx = fmaxf(mx, to_f(x[e]));
  float sum = 0.0f;
  for (int e = 0; e < experts; ++e) sum += expf(to_f(x[e]) - mx);
  const float inv = 1.0f / sum;
  // Round r picks the largest weight below the previous pick, or equal to it at a higher id: the picks come in
  // SGLang's order without marking experts (no scratch memory).
  float prev_p = INFINITY;
  int prev_e = -1;
  float picked = 0.0f;
  for (int r = 0; r < k; ++r) {
    float best = -1.0f;
    int at = -1;
    for (int e = 0; e < experts; ++e) {
      const float p = expf(to_f(x[e]) - mx) * inv;
      const bool after_prev = p < prev_p || (p == prev_p && e > prev_e);
      if (after_prev && p > best) {
        best = p;
        at = e;
      }
    }
    w[r] = best;
    id[r] = at;
    picked += best;
    prev_p = best;
    prev_e = at;
  }
  if (renormalize) {
    const float scale = 1.0f / picked;
    for (int r = 0; r < k; ++r) w[r] *= scale;
  }
}

ASTRA_ENTRY {
  if (num_tensors != 3 || num_scalars != 1) return ASTRA_UNSUPPORTED;
  const AstraTensor& w = tensors[0];
  const AstraTensor& id = tensors[1];
  const AstraTensor& g = tensors[2];
  if (w.ndim != 2 || id.ndim != 2 || g.ndim != 2 || w.dtype != ASTRA_FLOAT32 || id.dtype != ASTRA_INT32)
    return ASTRA_UNSUPPORTED;
  const int64_t tokens = g.shape[0], experts = g.shape[1], k = w.shape[1];
  if (w.shape[0] != tokens || id.shape[0] != tokens || id.shape[1] != k || k < 1 || k > experts) return ASTRA_UNSUPPORTED;
  if ((experts > 1 && g.stride[1] != 1) || (k > 1 && (w.stride[1] != 1 || id.stride[1] != 1))) return ASTRA_UNSUPPORTED;
  if (experts >= ((int64_t)1 << 31)) return ASTRA_UNSUPPORTED;
  if (tokens == 0) return ASTRA_OK;
  const int threads = 128;
  const dim3 grid((unsigned)((tokens + threads - 1) / threads));
  const bool renorm = scalars[0] != 0.0;
#define ASTRA_TOPK_LAUNCH(T)                                                                                      \
  topk_softmax_rows<T><<<grid, threads, 0, stream>>>((float*)w.data, (int32_t*)id.data, (const T*)g.data, tokens, \
                                                    (int)experts, (int)k, renorm, w.stride[0], id.stride[0],      \
                                                    g.stride[0])
  switch (g.dtype) {
    case ASTRA_FLOAT32: ASTRA_TOPK_LAUNCH(float); break;
    case ASTRA_FLOAT16: ASTRA_TOPK_LAUNCH(__half); break;
    case ASTRA_BFLOAT16: ASTRA_TOPK_LAUNCH(__nv_bfloat16); break;
    default: return ASTRA_UNSUPPORTED;
  }
#undef ASTRA_TOPK_LAUNCH
  return (int)cudaGetLastError();
}
