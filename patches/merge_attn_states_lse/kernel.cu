// merge_attn_states_lse (SGLang merge_state_v2; astra-sglang shipped kernel, hand-written): merge two
// partial attention states by their natural-log LSEs. v_* [tokens, heads, head_dim] of T, s_* fp32
// [tokens, heads]:
//   m = max(s_a, s_b); w_x = exp(s_x - m); v = (w_a v_a + w_b v_b) / (w_a + w_b); s = m + log(w_a + w_b).
// A ±inf LSE marks an empty partial state (treated as -inf); both empty -> v = 0, s = -inf (no NaN).
// Tensors (spec order): v_a, s_a, v_b, s_b, v_merged (out), s_merged (out); no scalars.
//
// Design (3 value tensors moved, ~3 flops per element: memory/latency bound):
//  - A group of G lanes (G a power of two <= 32, the fewest that cover head_dim with VPT vectors each)
//    per (token, head) pair; no shuffles, no barriers: every lane loads the pair's two LSEs itself (one
//    broadcast transaction per warp) and does the LSE math once, in fp32, then merges its vectors.
//  - All of a lane's value loads (VPT 16-byte vectors of v_a and of v_b) issued before the first use; with
//    ORDER 1-2 also before the LSE math (one DRAM round trip per lane, not two), in the order the knob says.
//  - 16-byte vectors when pointers and head_dim allow; else one element per access.
//  - Optional PDL: griddepcontrol.wait before any memory access keeps stream order exact.
//
// Tuner knobs (template parameters of astra_launch_cfg, in this order). PDL stays on: off cost ~0.6 us
// at small shapes in every op (H200, 2026-11-21, the knob sweep in docs/kernels.md).
// astra:knob THREADS 64 128 256 512
// astra:knob VPT 1 2 4
// astra:knob PDL 1
// astra:knob ORDER 0 1 2
#include <math.h>
#include "astra_device.cuh"  // conversions, Vec loads/stores, PDL, launch, access width, dtype dispatch

namespace {

// The LSE's base: natural log for SGLang's merge_state_v2; -DASTRA_LSE_BASE2=1 builds flashinfer's
// cascade.merge_state, whose LSEs are base 2 (patches/merge_state uses this file with that define).
#if defined(ASTRA_LSE_BASE2) && ASTRA_LSE_BASE2
__device__ __forceinline__ float lse_exp(float x) { return exp2f(x); }
__device__ __forceinline__ float lse_log(float x) { return log2f(x); }
#else
__device__ __forceinline__ float lse_exp(float x) { return expf(x); }
__device__ __forceinline__ float lse_log(float x) { return logf(x); }
#endif

// Thread t serves pair t >> lg_g, lane t & (G - 1); vectors lane, lane + G, ... of the pair.
// ORDER, when the first chunk's value loads are issued (SASS order of the LDGs):
//   0  after the LSE math, which waits on the LSE loads: two dependent DRAM round trips per lane
//   1  before the LSE loads ("early"): one round trip
//   2  after the LSE loads, before the math ("LSE first"): one round trip, the LSEs first in the queue
// ORDER 1-2 keep more registers live (45 at bf16 256 x 1 unbounded; a full SM, 32, spilled 40 bytes):
// 3/4 of an SM, 40 registers at 128 threads. With VPT > 1 that cap spilled 192-848 bytes: unbounded there.
template <typename T, int N, int THREADS, int VPT, bool PDL, int ORDER>
__global__ void __launch_bounds__(THREADS, ORDER && VPT == 1 ? 1536 / THREADS : 0)
merge_kernel(const T* __restrict__ va, const float* __restrict__ sa, const T* __restrict__ vb,
             const float* __restrict__ sb, T* __restrict__ vo, float* __restrict__ so, int64_t pairs, int nvec,
             int lg_g) {
  constexpr bool EARLY = ORDER != 0;
  pdl_wait<PDL>();
  pdl_trigger<PDL>();
  const int64_t t = (int64_t)blockIdx.x * THREADS + threadIdx.x;
  const int64_t p = t >> lg_g;
  if (p >= pairs) return;
  const int g = 1 << lg_g;
  const int lane = (int)(t & (g - 1));
  Vec<T, N> a0[VPT], b0[VPT];
  float a_raw, b_raw;
  if constexpr (ORDER == 2) a_raw = sa[p], b_raw = sb[p];
  if constexpr (EARLY) {
    const int64_t base = p * (int64_t)nvec * N;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int c = lane + k * g;
      if (c < nvec) {
        a0[k] = load<T, N>(va + base + (int64_t)c * N);
        b0[k] = load<T, N>(vb + base + (int64_t)c * N);
      }
    }
  }
  if constexpr (ORDER != 2) a_raw = sa[p], b_raw = sb[p];
  // LSE math once per lane, fp32, accurate expf/logf (a few dozen instructions against 2 * VPT loads).
  // exp(-inf) = 0 drops an empty state.
  const float a = isinf(a_raw) ? -INFINITY : a_raw;
  const float b = isinf(b_raw) ? -INFINITY : b_raw;
  const float m = fmaxf(a, b);
  const bool empty = m == -INFINITY;  // both states empty: defined as v = 0, s = -inf (not 0/0)
  const float wa = empty ? 0.0f : lse_exp(a - m), wb = empty ? 0.0f : lse_exp(b - m);
  const float inv = empty ? 0.0f : 1.0f / (wa + wb);  // wa + wb >= 1: the max term is exp(0)
  const float ca = wa * inv, cb = wb * inv;
  const int64_t base = p * (int64_t)nvec * N;
  for (int c0 = lane; c0 < nvec; c0 += g * VPT) {
    Vec<T, N> av[VPT], bv[VPT];
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int c = c0 + k * g;
      if (c < nvec) {
        av[k] = EARLY && c0 == lane ? a0[k] : load_ro<T, N>(va + base + (int64_t)c * N);
        bv[k] = EARLY && c0 == lane ? b0[k] : load_ro<T, N>(vb + base + (int64_t)c * N);
      }
    }
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int c = c0 + k * g;
      if (c < nvec) {
        Vec<T, N> ov;
#pragma unroll
        for (int e = 0; e < N; ++e)
          ov.e[e] = from_f<T>(empty ? 0.0f : (EARLY ? elem_f(av[k], e) : to_f(av[k].e[e])) * ca +
                                                 (EARLY ? elem_f(bv[k], e) : to_f(bv[k].e[e])) * cb);
        store<T, N>(vo + base + (int64_t)c * N, ov);
      }
    }
  }
  if (lane == 0) so[p] = empty ? -INFINITY : m + lse_log(wa + wb);
}

// log2 of the lanes per pair: the fewest (at most 32) that cover its nvec vectors with VPT each.
static int lanes_lg(int64_t nvec, int vpt) {
  int lg = 0;
  while ((1 << lg) < 32 && (int64_t)(1 << lg) * vpt < nvec) ++lg;
  return lg;
}

template <typename T, int N, int THREADS, int VPT, int PDL, int ORDER>
static int run(const AstraTensor* t, int64_t pairs, int64_t head_dim, cudaStream_t stream) {
  const int nvec = (int)(head_dim / N);
  const int lg = lanes_lg(nvec, VPT);
  const int64_t threads = pairs << lg;
  const int64_t blocks = (threads + THREADS - 1) / THREADS;
  if (blocks > 0x7fffffff) return ASTRA_UNSUPPORTED;
  return launch(merge_kernel<T, N, THREADS, VPT, PDL != 0, ORDER>, PDL != 0, dim3((unsigned)blocks), dim3(THREADS), 0, stream,
                static_cast<const T*>(t[0].data), static_cast<const float*>(t[1].data),
                static_cast<const T*>(t[2].data), static_cast<const float*>(t[3].data), static_cast<T*>(t[4].data),
                static_cast<float*>(t[5].data), pairs, nvec, lg);
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

static int validate(const AstraTensor* tensors, int num_tensors, int num_scalars) {
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
  if (v.shape[2] >= (int64_t)1 << 31) return ASTRA_UNSUPPORTED;  // vector index is 32-bit
  return ASTRA_OK;
}

// 16-byte accesses of the value tensors (contiguous, checked by validate): aligned bases, head_dim in whole vectors.
static bool vec_ok(const AstraTensor* t, int64_t elems) {
  return access_fits(16, elems, t[0].shape[2], 1, {t[0].data, t[2].data, t[4].data}, {});
}

}  // namespace

template <int THREADS, int VPT, int PDL, int ORDER>
static int astra_launch_cfg(const AstraTensor* tensors, int num_tensors, const double* scalars, int num_scalars,
                            cudaStream_t stream) {
  (void)scalars;
  const int bad = validate(tensors, num_tensors, num_scalars);
  if (bad != ASTRA_OK) return bad;
  const AstraTensor& v = tensors[0];
  const int64_t pairs = v.shape[0] * v.shape[1], head_dim = v.shape[2];
  if (pairs == 0) return ASTRA_OK;  // nothing to do: launch nothing
  return by_dtype(v.dtype, [&](auto type) {  // 16-byte vectors, else one element per access
    using T = typename decltype(type)::type;
    constexpr int V16 = 16 / (int)sizeof(T);
    return vec_ok(tensors, V16) ? run<T, V16, THREADS, VPT, PDL, ORDER>(tensors, pairs, head_dim, stream)
                                : run<T, 1, THREADS, VPT, PDL, ORDER>(tensors, pairs, head_dim, stream);
  });
}

#ifndef ASTRA_NO_DEFAULT_ENTRY
#ifndef ASTRA_DEFAULT_PDL
#define ASTRA_DEFAULT_PDL 1
#endif
// Hand-chosen dispatch, 128-thread blocks and one vector per lane everywhere; ORDER by size (H200,
// 2026-11-21, bf16, paper + model shapes, speedup vs SGLang's merge_state_v2; commit 30faccc,
// `bash benchmarks/gpu/call_f.sh OUT variants merge-x`):
//  - above 2^24 value elements (>= 8192 tokens x 28-64 heads x 128): ORDER 0, whose lighter blocks fill the
//    SM (0.989-1.002x; ORDER 1 at 128 threads 0.970-1.004x; the former 256-thread blocks 0.976-0.989x).
//  - a lane count (threads) in (2^15, 2^17], one partial wave of 3-8 blocks per SM (128 tokens x 28-64
//    heads x 128): ORDER 2 (1.194-1.256x; ORDER 1 1.102-1.229x, ORDER 0 1.137-1.209x). Why the LSEs must go
//    first only here is not understood. The `merge-final` plan of the same commit (each ORDER fixed) puts
//    the best edges at (49152, 163840] instead (ORDER 1 at 64x40x128 1.344 vs 1.281x, 96x32x128 1.299 vs 1.269x; ORDER 2 at
//    320x32x128 1.178 vs 1.138x; agreeing inside and above: 64x32x256, 256x32x128, 384x32x128). Not moved
//    yet: the held-out 300x8x96 would change ORDER, and this build's checks and memcheck ran with these edges.
//  - everything else: ORDER 1 (1-32 tokens 1.33-1.56x vs 1.24-1.33x; 512-2048 tokens 1.026-1.168x vs
//    1.009-1.110x).
ASTRA_ENTRY {
  const int bad = validate(tensors, num_tensors, num_scalars);
  if (bad != ASTRA_OK) return bad;
  const AstraTensor& v = tensors[0];
  const int64_t pairs = v.shape[0] * v.shape[1], elems = pairs * v.shape[2];
  const int64_t vec = v.dtype == ASTRA_FLOAT32 ? 4 : 8, nvec = vec_ok(tensors, vec) ? v.shape[2] / vec : v.shape[2];
  const int64_t threads = pairs << lanes_lg(nvec, 1);
  constexpr int P = ASTRA_DEFAULT_PDL;
  if (elems > ((int64_t)1 << 24))
    return astra_launch_cfg<128, 1, P, 0>(tensors, num_tensors, scalars, num_scalars, stream);
  if (threads > (1 << 15) && threads <= (1 << 17))
    return astra_launch_cfg<128, 1, P, 2>(tensors, num_tensors, scalars, num_scalars, stream);
  return astra_launch_cfg<128, 1, P, 1>(tensors, num_tensors, scalars, num_scalars, stream);
}
#endif
