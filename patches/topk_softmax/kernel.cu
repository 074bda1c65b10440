// topk_softmax (astra-sglang shipped kernel, hand-written): MoE routing. Per token t, p = softmax(gating[t, :])
// in fp32; topk_weights[t, r], topk_ids[t, r] = the r-th largest p and its expert (lowest id first among equal
// weights, SGLang's rule), weights divided by their sum when `renormalize`. Tensors (spec order): topk_weights
// [T, k] fp32, topk_ids [T, k] int32, gating_output [T, E] bf16/fp16/fp32; scalar: renormalize.
//
// Design (a row is 16-1024 bytes: the op is latency bound at decode and barely memory bound at prefill):
//  - LANES lanes per token (a power of two, up to a warp), each holding VPT consecutive experts in registers:
//    lane l owns experts [l * VPT, (l + 1) * VPT), so among lanes holding equal weights the lowest lane holds
//    the lowest id. E = 8 runs one thread per token, E = 128 16 lanes, E = 256 a warp; E = 60 takes 8 lanes,
//    the last half empty. One kernel for every expert count (SGLang runs three kernels and a workspace
//    allocation where E is not a power of two).
//  - Loads of 16 bytes where the row width allows, else 8, else one element; issued before any use.
//  - Softmax as SGLang computes it (expf(x - max) * (1 / sum), fp32), so the picked order matches its order.
//  - k rounds of argmax: the group's max by a float butterfly (one shuffle a step), the owner by a ballot (the
//    lowest lane holding that value), its expert by one shuffle; only the owner rescans its VPT values (a tree).
//  - Round r's result is kept by lane r % LANES in a small register queue, and the lanes store their rounds
//    together at the end, scaled by 1 / (sum of the k weights) when renormalizing: no second pass.
//  - Blocks shrink at small token counts so that a decode-sized call spreads over many SMs; PDL as in the
//    other shipped kernels (griddepcontrol.wait before the first load).
//
// Tuner knobs (template parameters of astra_launch_cfg, in this order): VPT experts per lane (LANES follows
// from E), WARPS the largest block in warps, PDL.
// astra:knob VPT 8 4 16
// astra:knob WARPS 4 1 2 8
// astra:knob PDL 1
#include "astra_device.cuh"  // conversions, Vec loads, PDL, launch, dtype dispatch

namespace {

constexpr float CLEARED = -1.0f;  // below every softmax weight: an expert already picked, or past E

// The lane's largest weight and its slot: a tree over the slots in which the right half wins only when strictly
// larger, so equal weights resolve to the lowest slot (the lowest expert id).
template <int VPT>
__device__ __forceinline__ void lane_best(const float (&p)[VPT], float& best, int& slot) {
  float v[VPT];
  int at[VPT];
#pragma unroll
  for (int j = 0; j < VPT; ++j) {
    v[j] = p[j];
    at[j] = j;
  }
#pragma unroll
  for (int w = 1; w < VPT; w *= 2) {
#pragma unroll
    for (int j = 0; j + w < VPT; j += 2 * w) {
      if (v[j + w] > v[j]) {
        v[j] = v[j + w];
        at[j] = at[j + w];
      }
    }
  }
  best = v[0];
  slot = at[0];
}

template <int LANES>
__device__ __forceinline__ float group_max(float v) {
#pragma unroll
  for (int o = LANES / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o, LANES));
  return v;
}

template <int LANES>
__device__ __forceinline__ float group_sum(float v) {
#pragma unroll
  for (int o = LANES / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o, LANES);
  return v;
}

// KS: rounds a lane keeps (round r goes to lane r % LANES), so k <= KS * LANES.
template <typename T, int LANES, int VPT, int VEC, int KS, bool PDL>
__global__ void __launch_bounds__(256)
topk_softmax_kernel(float* __restrict__ weights, int32_t* __restrict__ ids, const T* __restrict__ gating,
                    int tokens, int experts, int k, bool renormalize, int64_t w_stride, int64_t id_stride,
                    int64_t g_stride) {
  static_assert(VPT % VEC == 0 && 32 % LANES == 0, "a lane loads whole vectors; groups tile a warp");
  const int lane = threadIdx.x % 32;
  const int warp_row = (blockIdx.x * blockDim.x + threadIdx.x - lane) / LANES;  // first token of this warp
  if (warp_row >= tokens) return;  // whole warps only: the rest of the warp joins every shuffle below
  const int g = lane % LANES;      // lane within the token's group
  const int row = warp_row + lane / LANES;
  const int r_ld = row < tokens ? row : tokens - 1;  // a group past the end works on the last row, stores nothing
  pdl_wait<PDL>();
  pdl_trigger<PDL>();

  // Load: VPT / VEC vectors per lane, all in flight before the first use.
  const T* src = gating + (int64_t)r_ld * g_stride + g * VPT;
  Vec<T, VEC> raw[VPT / VEC];
#pragma unroll
  for (int v = 0; v < VPT / VEC; ++v) {
    if (g * VPT + v * VEC < experts) raw[v] = load_ro<T, VEC>(src + v * VEC);  // E % VEC == 0 (host check)
  }
  float p[VPT];
  float mx = -INFINITY;
#pragma unroll
  for (int j = 0; j < VPT; ++j) {
    const bool in = g * VPT + j < experts;
    p[j] = in ? elem_f(raw[j / VEC], j % VEC) : -INFINITY;
    mx = fmaxf(mx, p[j]);
  }
  mx = group_max<LANES>(mx);
  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < VPT; ++j) {
    p[j] = g * VPT + j < experts ? expf(p[j] - mx) : 0.0f;
    sum += p[j];
  }
  const float inv = 1.0f / group_sum<LANES>(sum);
#pragma unroll
  for (int j = 0; j < VPT; ++j) p[j] = g * VPT + j < experts ? p[j] * inv : CLEARED;

  float best;
  int slot;
  lane_best<VPT>(p, best, slot);
  float kept_w[KS];
  int kept_id[KS];
  float picked = 0.0f;  // sum of the picked weights, in pick order (SGLang's order)
  const unsigned group_bits = LANES == 32 ? 0xffffffffu : ((1u << LANES) - 1u) << (lane - g);
  for (int r = 0; r < k; ++r) {
    float top = best;
    int owner = 0, id = g * VPT + slot;
    if constexpr (LANES > 1) {
      top = group_max<LANES>(best);
      const unsigned hits = __ballot_sync(0xffffffffu, best == top) & group_bits;
      owner = __ffs(hits) - 1 - (lane - g);
      id = __shfl_sync(0xffffffffu, id, owner, LANES);
    }
    picked += top;
    if (g == r % LANES) {  // this lane keeps round r: newest first
#pragma unroll
      for (int s = KS - 1; s > 0; --s) {
        kept_w[s] = kept_w[s - 1];
        kept_id[s] = kept_id[s - 1];
      }
      kept_w[0] = top;
      kept_id[0] = id;
    }
    if (g == owner) {
#pragma unroll
      for (int j = 0; j < VPT; ++j) p[j] = j == slot ? CLEARED : p[j];
      lane_best<VPT>(p, best, slot);
    }
  }
  if (row >= tokens) return;
  const float scale = renormalize ? 1.0f / picked : 1.0f;
  const int mine = g < k ? (k - 1 - g) / LANES + 1 : 0;  // rounds this lane kept
  float* w_row = weights + (int64_t)row * w_stride;
  int32_t* id_row = ids + (int64_t)row * id_stride;
#pragma unroll
  for (int s = 0; s < KS; ++s) {
    if (s < mine) {
      const int r = g + (mine - 1 - s) * LANES;
      w_row[r] = kept_w[s] * scale;
      id_row[r] = kept_id[s];
    }
  }
}

struct Call {
  const AstraTensor& w;
  const AstraTensor& id;
  const AstraTensor& g;
  int tokens, experts, k;
  bool renormalize;
};

// SMs of the current device (cached per device): small calls get blocks small enough to reach most of them.
static int sm_count() {
  static int counts[64] = {};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return 132;
  if (!counts[dev] && cudaDeviceGetAttribute(&counts[dev], cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
    counts[dev] = 132;
  return counts[dev];
}

template <typename T, int LANES, int VPT, int VEC, int WARPS, bool PDL>
static int run(const Call& c, cudaStream_t stream) {
  constexpr int KS = (16 + LANES - 1) / LANES < VPT ? (16 + LANES - 1) / LANES : VPT;  // k <= 16 (or E)
  if (c.k > KS * LANES) return ASTRA_UNSUPPORTED;
  const int64_t threads_needed = (int64_t)c.tokens * LANES;
  // The largest block (WARPS warps) once every SM has a block; below that, blocks of just enough warps.
  int64_t warps = (threads_needed + 31) / 32;
  int per_block = (int)((warps + sm_count() - 1) / sm_count());
  per_block = per_block < 1 ? 1 : per_block > WARPS ? WARPS : per_block;
  const int64_t blocks = (warps + per_block - 1) / per_block;
  if (blocks > 0x7fffffff) return ASTRA_UNSUPPORTED;
  return launch(topk_softmax_kernel<T, LANES, VPT, VEC, KS, PDL>, PDL, dim3((unsigned)blocks), dim3(32 * per_block),
                0, stream, static_cast<float*>(c.w.data), static_cast<int32_t*>(c.id.data),
                static_cast<const T*>(c.g.data), c.tokens, c.experts, c.k, c.renormalize, c.w.stride[0],
                c.id.stride[0], c.g.stride[0]);
}

// LANES = the power of two that covers E with VPT experts a lane.
template <typename T, int VPT, int VEC, int WARPS, bool PDL>
static int by_lanes(const Call& c, cudaStream_t stream) {
  const int need = (c.experts + VPT - 1) / VPT;
  if (need <= 1) return run<T, 1, VPT, VEC, WARPS, PDL>(c, stream);
  if (need <= 2) return run<T, 2, VPT, VEC, WARPS, PDL>(c, stream);
  if (need <= 4) return run<T, 4, VPT, VEC, WARPS, PDL>(c, stream);
  if (need <= 8) return run<T, 8, VPT, VEC, WARPS, PDL>(c, stream);
  if (need <= 16) return run<T, 16, VPT, VEC, WARPS, PDL>(c, stream);
  if (need <= 32) return run<T, 32, VPT, VEC, WARPS, PDL>(c, stream);
  return ASTRA_UNSUPPORTED;  // more than 32 * VPT experts: SGLang's op serves it
}

// The widest load a lane's run of experts allows: 16 or 8 bytes when E (so every lane's first expert and every
// row) and the base and row stride line up, else one element.
template <typename T, int VPT, int WARPS, bool PDL>
static int by_vec(const Call& c, cudaStream_t stream) {
  constexpr int V16 = 16 / (int)sizeof(T) < VPT ? 16 / (int)sizeof(T) : VPT;
  auto fits = [&](int elems) {
    const int bytes = elems * (int)sizeof(T);
    return (uintptr_t)c.g.data % bytes == 0 && c.experts % elems == 0 && (c.tokens == 1 || c.g.stride[0] % elems == 0);
  };
  if (fits(V16)) return by_lanes<T, VPT, V16, WARPS, PDL>(c, stream);
  if (V16 > 1 && fits(V16 / 2)) return by_lanes<T, VPT, (V16 > 1 ? V16 / 2 : 1), WARPS, PDL>(c, stream);
  return by_lanes<T, VPT, 1, WARPS, PDL>(c, stream);
}

static bool row_major(const AstraTensor& t) { return t.ndim == 2 && (t.shape[1] <= 1 || t.stride[1] == 1); }

}  // namespace

template <int VPT, int WARPS, int PDL>
static int astra_launch_cfg(const AstraTensor* tensors, int num_tensors, const double* scalars, int num_scalars,
                            cudaStream_t stream) {
  if (num_tensors != 3 || num_scalars != 1) return ASTRA_UNSUPPORTED;
  const AstraTensor& w = tensors[0];
  const AstraTensor& id = tensors[1];
  const AstraTensor& g = tensors[2];
  if (w.dtype != ASTRA_FLOAT32 || id.dtype != ASTRA_INT32 || !row_major(w) || !row_major(id) || !row_major(g))
    return ASTRA_UNSUPPORTED;
  const int64_t tokens = g.shape[0], experts = g.shape[1], k = w.shape[1];
  if (w.shape[0] != tokens || id.shape[0] != tokens || id.shape[1] != k) return ASTRA_UNSUPPORTED;
  if (tokens >= ((int64_t)1 << 31) / 32 || k < 1 || k > experts) return ASTRA_UNSUPPORTED;
  if (tokens == 0) return ASTRA_OK;  // nothing to do: launch nothing
  const Call c{w, id, g, (int)tokens, (int)experts, (int)k, scalars[0] != 0.0};
  return by_dtype(g.dtype, [&](auto type) {
    using T = typename decltype(type)::type;
    return by_vec<T, VPT, WARPS, PDL != 0>(c, stream);
  });
}

#ifndef ASTRA_NO_DEFAULT_ENTRY
#ifndef ASTRA_DEFAULT_PDL
#define ASTRA_DEFAULT_PDL 1
#endif
// 8 experts a lane up to 256 experts (one 16-byte load at 2 bytes: Mixtral one thread a token, Qwen3-MoE's 128
// 16 lanes), 16 up to 512; blocks of at most 4 warps. Timed against SGLang's kernel (H100, 2026-11-25, manifest
// `measured`): 1.23-1.28x at 128 experts top-8; the knobs were not swept.
ASTRA_ENTRY {
  constexpr int P = ASTRA_DEFAULT_PDL;
  if (num_tensors == 3 && tensors[2].ndim == 2 && tensors[2].shape[1] > 256)
    return astra_launch_cfg<16, 4, P>(tensors, num_tensors, scalars, num_scalars, stream);
  return astra_launch_cfg<8, 4, P>(tensors, num_tensors, scalars, num_scalars, stream);
}
#endif
