// rotary_embedding: in place, the first rot features of every head of q [T, H, D] and k [T, KV, D] rotated by
// the angles of their token's position; cache [max_pos, >= rot] fp32 (cos in [0, rot/2), sin in [rot/2, rot)),
// positions int64; scalars is_neox, rope_dim (0: the cache's width). Baseline kernel (our own): one thread per
// rotated pair, fp32 math, element accesses, any strides, so every layout the spec allows works.
#include "astra_abi.h"
#include "astra_device.cuh"  // to_f / from_f

template <typename T>
__global__ void rope_pair_kernel(T* q, T* k, const float* cache, const int64_t* pos, int64_t heads, int64_t kv_heads,
                                 int64_t half, bool neox, int64_t pairs, int64_t qs0, int64_t qs1, int64_t ks0,
                                 int64_t ks1, int64_t cs0, int64_t ps0) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < pairs; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t j = i % half;  // the pair's angle
    const int64_t h = (i / half) % (heads + kv_heads);
    const int64_t t = i / half / (heads + kv_heads);
    T* row = h < heads ? q + t * qs0 + h * qs1 : k + t * ks0 + (h - heads) * ks1;
    T* a = neox ? row + j : row + 2 * j;
    T* b = neox ? row + j + half : row + 2 * j + 1;
    const float* c = cache + pos[t * ps0] * cs0;
    const float cos = c[j], sin = c[half + j], x = to_f(*a), y = to_f(*b);
    *a = from_f<T>(x * cos - y * sin);
    *b = from_f<T>(y * cos + x * sin);
  }
}

template <typename T>
static int launch(const AstraTensor* t, int64_t rot, bool neox, cudaStream_t stream) {
  const AstraTensor &q = t[0], &k = t[1], &cache = t[2], &pos = t[3];
  const int64_t pairs = q.shape[0] * (q.shape[1] + k.shape[1]) * (rot / 2);
  if (pairs == 0) return ASTRA_OK;
  const int64_t blocks = (pairs + 255) / 256;
  rope_pair_kernel<T><<<(unsigned)(blocks < 65535 ? blocks : 65535), 256, 0, stream>>>(
      static_cast<T*>(q.data), static_cast<T*>(k.data), static_cast<const float*>(cache.data),
      static_cast<const int64_t*>(pos.data), q.shape[1], k.shape[1], rot / 2, neox, pairs, q.stride[0], q.stride[1],
      k.stride[0], k.stride[1], cache.stride[0], pos.stride[0]);
  return (int)cudaGetLastError();
}

ASTRA_ENTRY {
  if (num_tensors != 4 || num_scalars != 2) return ASTRA_UNSUPPORTED;
  const AstraTensor &q = tensors[0], &k = tensors[1], &cache = tensors[2], &pos = tensors[3];
  if (q.ndim != 3 || k.ndim != 3 || cache.ndim != 2 || pos.ndim != 1 || q.dtype != k.dtype) return ASTRA_UNSUPPORTED;
  if (cache.dtype != ASTRA_FLOAT32 || pos.dtype != ASTRA_INT64) return ASTRA_UNSUPPORTED;
  if (k.shape[0] != q.shape[0] || pos.shape[0] != q.shape[0] || k.shape[2] != q.shape[2]) return ASTRA_UNSUPPORTED;
  if (q.shape[2] > 1 && (q.stride[2] != 1 || k.stride[2] != 1)) return ASTRA_UNSUPPORTED;
  if (cache.shape[1] > 1 && cache.stride[1] != 1) return ASTRA_UNSUPPORTED;
  const int64_t rot = scalars[1] != 0.0 ? (int64_t)scalars[1] : cache.shape[1];
  if (rot < 2 || rot % 2 != 0 || rot > q.shape[2] || rot > cache.shape[1]) return ASTRA_UNSUPPORTED;
  const bool neox = scalars[0] != 0.0;
  switch (q.dtype) {
    case ASTRA_FLOAT16: return launch<__half>(tensors, rot, neox, stream);
    case ASTRA_BFLOAT16: return launch<__nv_bfloat16>(tensors, rot, neox, stream);
    default: return ASTRA_UNSUPPORTED;
  }
}
