// rotary_embedding (astra-sglang shipped kernel, hand-written): in place, the first rot features of every head of
// q [T, H, D] and k [T, KV, D] rotated by the angles of their token's position, fp32 math from the fp32 cache
// [max_pos, >= rot] (cos in [0, rot/2), sin in [rot/2, rot)), rounded to T (bf16/fp16) once. Neox style rotates
// (x[i], x[i + rot/2]), GPT-J style (x[2i], x[2i + 1]). rot = rope_dim, or the cache's width when rope_dim is 0;
// features [rot, D) stay untouched. Scalars (spec order): is_neox, rope_dim. Positions are int64.
//
// Design (the op moves 4 * T * (H + KV) * rot bytes at 2 bytes an element and a cache row a token: memory/latency
// bound, two dependent reads per head: the position, then its cache row):
//  - One launch for q and k: q's heads and k's heads are one head index h < H + KV, and a thread picks q's or k's
//    pointer and strides by it, so SGLang's views of its qkv projection (row stride (H + 2 KV) * D, or a partial
//    rotary slice [..., :rot] of each head) are rotated where they lie.
//  - A thread owns one slot of N elements (16 bytes where the layout allows; 8, else narrower) of HPT heads of one
//    token: neox, N features of the first half and their partners N features later in the second half; GPT-J, N
//    adjacent features (N / 2 pairs). Its cos / sin (N or N / 2 floats, 16-byte reads) are read once for its HPT
//    heads, which share the token.
//  - The flat thread index runs slot-fastest, then head group, then token: a warp reads whole head rows, and a
//    decode-sized call (1-64 tokens x 40 heads x 8 slots) still spreads over hundreds of small blocks.
//  - The q / k loads are issued before the cache row's: they need no position, so the position's latency hides
//    behind them.
//  - Optional PDL: griddepcontrol.wait before any memory access keeps stream order exact.
//
// Tuner knobs (template parameters of astra_launch_cfg, in this order). The default entry's dispatch below is a
// first choice, not yet measured against alternatives.
// astra:knob THREADS 64 128 256 512
// HPT: heads per thread (one cos / sin read serves them all; fewer threads at large token counts).
// astra:knob HPT 1 2 4
// astra:knob PDL 1
#include <utility>
#include "astra_device.cuh"  // conversions, Vec loads/stores, PDL, launch

namespace {

struct RopeParams {
  void* q;
  void* k;
  const float* cache;
  const int64_t* positions;
  int64_t q_token, q_head, k_token, k_head;  // strides, elements
  int64_t cache_row, pos_stride;
  uint32_t heads;  // H: head h < H is q's head h, else k's head h - H
  uint32_t all_heads;  // H + KV
  uint32_t groups;  // ceil((H + KV) / HPT): a thread's heads are g, g + groups, ...
  uint32_t slots;  // threads per head: half / N (neox) or rot / N (GPT-J)
  uint32_t items;  // tokens * groups * slots
  uint32_t half;  // rot / 2
};

// CN floats of the cache (CN = N or N / 2) in reads of up to 16 bytes.
template <int CN> __device__ __forceinline__ Vec<float, CN> load_cache(const float* p) {
  Vec<float, CN> v;
  if constexpr (CN % 4 == 0) {
#pragma unroll
    for (int c = 0; c < CN / 4; ++c) {
      const Vec<float, 4> part = load_ro<float, 4>(p + 4 * c);
#pragma unroll
      for (int e = 0; e < 4; ++e) v.e[4 * c + e] = part.e[e];
    }
  } else {
    v = load_ro<float, CN>(p);  // 8 bytes (CN 2) or one float
  }
  return v;
}

template <typename T, int N, bool NEOX, int HPT, bool PDL>
__global__ void rope_kernel(const __grid_constant__ RopeParams p) {
  pdl_wait<PDL>();
  pdl_trigger<PDL>();
  const uint32_t item = blockIdx.x * blockDim.x + threadIdx.x;
  if (item >= p.items) return;
  const uint32_t slot = item % p.slots;
  const uint32_t rest = item / p.slots;
  const uint32_t group = rest % p.groups;
  const uint32_t token = rest / p.groups;
  const int64_t pos = __ldg(p.positions + token * p.pos_stride);

  // The heads' loads first: they do not wait on the position.
  T* row[HPT];
  Vec<T, N> x[HPT], y[HPT];
#pragma unroll
  for (int i = 0; i < HPT; ++i) {
    const uint32_t h = group + i * p.groups;
    row[i] = nullptr;
    if (h < p.all_heads) {
      row[i] = h < p.heads ? static_cast<T*>(p.q) + token * p.q_token + h * p.q_head
                           : static_cast<T*>(p.k) + token * p.k_token + (h - p.heads) * p.k_head;
      row[i] += slot * N;
      x[i] = load<T, N>(row[i]);
      if constexpr (NEOX) y[i] = load<T, N>(row[i] + p.half);
    }
  }
  constexpr int CN = NEOX ? N : N / 2;  // angles this thread's slot uses
  const float* cs = p.cache + pos * p.cache_row + slot * CN;
  const Vec<float, CN> c = load_cache<CN>(cs);
  const Vec<float, CN> s = load_cache<CN>(cs + p.half);

#pragma unroll
  for (int i = 0; i < HPT; ++i) {
    if (row[i] == nullptr) continue;
    if constexpr (NEOX) {
      Vec<T, N> ox, oy;
#pragma unroll
      for (int e = 0; e < N; ++e) {
        const float a = elem_f(x[i], e), b = elem_f(y[i], e);
        ox.e[e] = from_f<T>(a * c.e[e] - b * s.e[e]);
        oy.e[e] = from_f<T>(b * c.e[e] + a * s.e[e]);
      }
      store<T, N>(row[i], ox);
      store<T, N>(row[i] + p.half, oy);
    } else {
      Vec<T, N> o;
#pragma unroll
      for (int e = 0; e < CN; ++e) {
        const float a = elem_f(x[i], 2 * e), b = elem_f(x[i], 2 * e + 1);
        o.e[2 * e] = from_f<T>(a * c.e[e] - b * s.e[e]);
        o.e[2 * e + 1] = from_f<T>(b * c.e[e] + a * s.e[e]);
      }
      store<T, N>(row[i], o);
    }
  }
}

// One call's tensors and rotation width, validated.
struct Rope {
  const AstraTensor *q, *k, *cache, *positions;
  int64_t rot;
  bool neox;
};

static int validate(const AstraTensor* t, int num_tensors, const double* scalars, int num_scalars, Rope& r) {
  if (num_tensors != 4 || num_scalars != 2) return ASTRA_UNSUPPORTED;
  const AstraTensor &q = t[0], &k = t[1], &cache = t[2], &pos = t[3];
  if (q.ndim != 3 || k.ndim != 3 || cache.ndim != 2 || pos.ndim != 1) return ASTRA_UNSUPPORTED;
  if (q.dtype != k.dtype || (q.dtype != ASTRA_BFLOAT16 && q.dtype != ASTRA_FLOAT16)) return ASTRA_UNSUPPORTED;
  if (cache.dtype != ASTRA_FLOAT32 || pos.dtype != ASTRA_INT64) return ASTRA_UNSUPPORTED;
  if (k.shape[0] != q.shape[0] || pos.shape[0] != q.shape[0] || k.shape[2] != q.shape[2]) return ASTRA_UNSUPPORTED;
  // Features dense within a head (a size-1 dim's stride is meaningless); tokens and heads may have any stride.
  if (q.shape[2] > 1 && (q.stride[2] != 1 || k.stride[2] != 1)) return ASTRA_UNSUPPORTED;
  if (cache.shape[1] > 1 && cache.stride[1] != 1) return ASTRA_UNSUPPORTED;
  const int64_t rot = scalars[1] != 0.0 ? (int64_t)scalars[1] : cache.shape[1];
  if (rot < 2 || rot % 2 != 0 || rot > q.shape[2] || rot > cache.shape[1]) return ASTRA_UNSUPPORTED;
  const int64_t heads = q.shape[1] + k.shape[1];
  if (heads >= ((int64_t)1 << 31) || q.shape[0] * heads * (rot / 2) >= ((int64_t)1 << 31)) return ASTRA_UNSUPPORTED;
  r = Rope{&q, &k, &cache, &pos, rot, scalars[0] != 0.0};
  return ASTRA_OK;
}

// Does a slot of N elements of T fit this call's layout: q/k bases, token and head strides, the half (neox) or
// the width (GPT-J) whole slots, and the cache's reads of min(CN, 4) floats aligned (base, row stride, sin's offset).
static bool slot_fits(const Rope& r, int n, int elem_bytes) {
  if (!r.neox && n < 2) return false;  // a GPT-J slot holds whole pairs
  const int64_t span = r.neox ? r.rot / 2 : r.rot;
  if (span % n != 0) return false;
  const AstraTensor &q = *r.q, &k = *r.k, &cache = *r.cache;
  if ((uintptr_t)q.data % (n * elem_bytes) != 0 || (uintptr_t)k.data % (n * elem_bytes) != 0) return false;
  const int64_t tokens = q.shape[0];  // a size-1 dim's stride is never used: it need not be whole slots
  for (auto [size, stride] : {std::pair{tokens, q.stride[0]}, {q.shape[1], q.stride[1]}, {tokens, k.stride[0]},
                              {k.shape[1], k.stride[1]}})
    if (size > 1 && stride % n != 0) return false;
  const int cn = r.neox ? n : n / 2;
  const int chunk = cn >= 4 ? 4 : cn;
  return (uintptr_t)cache.data % (4 * chunk) == 0 && (cache.shape[0] == 1 || cache.stride[0] % chunk == 0) &&
         (r.rot / 2) % chunk == 0;
}

// The widest slot this call's layout allows (elements of 2 bytes): 16 bytes, 8, else narrower; 0 if none.
static int slot_elems(const Rope& r) {
  for (int n : {8, 4, 2, 1})
    if (slot_fits(r, n, 2)) return n;
  return 0;
}

template <typename T, int N, bool NEOX, int THREADS, int HPT, int PDL>
static int run(const Rope& r, cudaStream_t stream) {
  const AstraTensor &q = *r.q, &k = *r.k;
  RopeParams p;
  p.q = q.data;
  p.k = k.data;
  p.cache = static_cast<const float*>(r.cache->data);
  p.positions = static_cast<const int64_t*>(r.positions->data);
  p.q_token = q.stride[0];
  p.q_head = q.stride[1];
  p.k_token = k.stride[0];
  p.k_head = k.stride[1];
  p.cache_row = r.cache->stride[0];
  p.pos_stride = r.positions->stride[0];
  p.heads = (uint32_t)q.shape[1];
  p.all_heads = (uint32_t)(q.shape[1] + k.shape[1]);
  p.groups = (p.all_heads + HPT - 1) / HPT;
  p.half = (uint32_t)(r.rot / 2);
  p.slots = (uint32_t)((NEOX ? r.rot / 2 : r.rot) / N);
  const int64_t items = q.shape[0] * (int64_t)p.groups * p.slots;
  p.items = (uint32_t)items;
  const int64_t want = (items + 31) / 32 * 32;  // a call smaller than a block gets just enough whole warps
  const int nt = want < THREADS ? (int)want : THREADS;
  const int64_t blocks = (items + nt - 1) / nt;
  return launch(rope_kernel<T, N, NEOX, HPT, PDL != 0>, PDL != 0, dim3((unsigned)blocks), dim3(nt), 0, stream, p);
}

template <typename T, bool NEOX, int THREADS, int HPT, int PDL>
static int by_slot(const Rope& r, int n, cudaStream_t stream) {
  switch (n) {
    case 8: return run<T, 8, NEOX, THREADS, HPT, PDL>(r, stream);
    case 4: return run<T, 4, NEOX, THREADS, HPT, PDL>(r, stream);
    case 2: return run<T, 2, NEOX, THREADS, HPT, PDL>(r, stream);
    default:
      if constexpr (NEOX) return run<T, 1, NEOX, THREADS, HPT, PDL>(r, stream);
      else return ASTRA_UNSUPPORTED;  // slot_fits never gives a GPT-J slot of one element
  }
}

}  // namespace

template <int THREADS, int HPT, int PDL>
static int astra_launch_cfg(const AstraTensor* tensors, int num_tensors, const double* scalars, int num_scalars,
                            cudaStream_t stream) {
  Rope r;
  const int bad = validate(tensors, num_tensors, scalars, num_scalars, r);
  if (bad != ASTRA_OK) return bad;
  if (r.q->shape[0] == 0 || r.q->shape[1] + r.k->shape[1] == 0) return ASTRA_OK;  // nothing to rotate: launch nothing
  const int n = slot_elems(r);
  if (n == 0) return ASTRA_UNSUPPORTED;  // e.g. GPT-J heads at odd element offsets
  auto go = [&](auto type) {
    using T = typename decltype(type)::type;
    return r.neox ? by_slot<T, true, THREADS, HPT, PDL>(r, n, stream) : by_slot<T, false, THREADS, HPT, PDL>(r, n, stream);
  };
  return r.q->dtype == ASTRA_BFLOAT16 ? go(Type<__nv_bfloat16>{}) : go(Type<__half>{});
}

#ifndef ASTRA_NO_DEFAULT_ENTRY
#ifndef ASTRA_DEFAULT_PDL
#define ASTRA_DEFAULT_PDL 1
#endif
// Hand-chosen dispatch by the call's thread count at one head a thread (tokens x heads x slots; Llama-3-8B: 320
// a token): up to 2^17 (~400 tokens there), 64-thread blocks and one head a thread, so 1-64 tokens spread over
// 5-320 blocks; above, 256-thread blocks and two heads a thread (one cos / sin read for both).
ASTRA_ENTRY {
  Rope r;
  const int bad = validate(tensors, num_tensors, scalars, num_scalars, r);
  if (bad != ASTRA_OK) return bad;
  const int n = slot_elems(r);
  const int64_t slots = n ? (r.neox ? r.rot / 2 : r.rot) / n : 0;
  const int64_t threads = r.q->shape[0] * (r.q->shape[1] + r.k->shape[1]) * slots;
  constexpr int P = ASTRA_DEFAULT_PDL;
  if (threads <= ((int64_t)1 << 17)) return astra_launch_cfg<64, 1, P>(tensors, num_tensors, scalars, num_scalars, stream);
  return astra_launch_cfg<256, 2, P>(tensors, num_tensors, scalars, num_scalars, stream);
}
#endif
