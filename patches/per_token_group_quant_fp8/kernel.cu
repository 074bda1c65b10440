// per_token_group_quant_fp8 (astra-sglang shipped kernel, hand-written): per token t and group g of 128 features,
// s = max(amax |x[t, g*128 : (g+1)*128]|, eps) / 448, x_q = fp8 e4m3 (saturating) of x / s, x_s[t, g] = s.
// x [T, H] bf16/fp16, x_q [T, H] e4m3, x_s [T, H/128] fp32 written through its strides: row-major (the Triton
// GEMM path) or column-major / TMA-aligned (DeepGEMM on Hopper, SGLang's default there) alike.
//
// Arithmetic: SGLang 0.5.17's CUDA kernel (its JIT per_token_group_quant, built with --use_fast_math), so x_q and
// x_s come out bit-identical to it: amax over the packed 16-bit values (exact), s = amax * (1/448 as a float),
// x * (448 / amax) with the division approximate (div.approx, as fast-math compiles it; 2 ulp), clamped above
// at 448 (NaN and +inf go to +448, -inf saturates to -448), rounded to nearest-even by the satfinite conversion.
// Where amax > 2^126 the approximate division underflows to 0, so there the division is IEEE (SGLang's kernel
// writes zeros for such groups).
//
// Design (3 bytes moved per element, a handful of instructions: memory/latency bound):
//  - A group is LANES lanes of a warp (16: one 16-byte load each; 8: two), so a warp handles 32 / LANES groups
//    and the amax is log2(LANES) shuffles of packed 16-bit pairs.
//  - One group per lane set, blocks of THREADS threads: a decode call (1x7168: 56 groups) spreads over as many
//    SMs as its groups allow; a prefill call has every load of the grid in flight at once.
//  - Column-major scales: consecutive lane sets take consecutive tokens of one group, so their scale stores land
//    side by side (row-major scales: consecutive groups of one token).
//  - PDL: griddepcontrol.wait before the first load; the next kernel may launch while this one runs.
//
// Tuner knobs (template parameters of astra_launch_cfg, in this order):
// astra:knob LANES 8 16
// astra:knob THREADS 64 128 256 512
// astra:knob PDL 0 1
#include <cuda_fp8.h>
#include "astra_device.cuh"  // Vec loads/stores, PDL, launch

namespace {

constexpr int GROUP = 128;
constexpr float FP8_MAX = 448.0f;

template <typename T> struct Packed;
template <> struct Packed<__nv_bfloat16> { using type = __nv_bfloat162; };
template <> struct Packed<__half> { using type = __half2; };

template <typename T2> __device__ __forceinline__ T2 as_pair(uint32_t w) {
  T2 v;
  __builtin_memcpy(&v, &w, 4);
  return v;
}
template <typename T2> __device__ __forceinline__ uint32_t as_word(T2 v) {
  uint32_t w;
  __builtin_memcpy(&w, &v, 4);
  return w;
}
__device__ __forceinline__ float2 to_f2(__nv_bfloat162 v) { return __bfloat1622float2(v); }
__device__ __forceinline__ float2 to_f2(__half2 v) { return __half22float2(v); }

// Two scaled values to two e4m3 bytes (x in the low byte, so memory order is kept).
__device__ __forceinline__ uint32_t fp8x2(float2 v, float q) {
  const float2 s = make_float2(fminf(v.x * q, FP8_MAX), fminf(v.y * q, FP8_MAX));
  return (uint32_t)__nv_cvt_float2_to_fp8x2(s, __NV_SATFINITE, __NV_E4M3);
}

template <typename T, int LANES, int THREADS, bool PDL, bool TOKEN_MAJOR>
__global__ void __launch_bounds__(THREADS)
group_quant_kernel(const T* __restrict__ x, uint8_t* __restrict__ xq, float* __restrict__ xs, uint32_t tokens,
                   uint32_t groups, int64_t x_stride, int64_t q_stride, int64_t s_token, int64_t s_group, float eps) {
  using T2 = typename Packed<T>::type;
  constexpr int ELEMS = GROUP / LANES;  // per lane: 8 (one 16-byte load) or 16 (two)
  constexpr int LOADS = ELEMS / 8;
  constexpr int SETS = THREADS / LANES;  // groups per block
  static_assert(32 % LANES == 0 && THREADS % 32 == 0 && ELEMS % 8 == 0, "a group is whole 16-byte loads of a warp");
  const uint32_t total = tokens * groups;
  // Whole warps leave together (the shuffles need every lane); a partial last warp repeats the last group,
  // storing the same bytes twice.
  const uint32_t warp_first = (blockIdx.x * THREADS + (threadIdx.x & ~31u)) / LANES;
  if (warp_first >= total) return;
  const uint32_t work = min(blockIdx.x * SETS + threadIdx.x / LANES, total - 1);
  const uint32_t lane = threadIdx.x % LANES;
  const uint32_t t = TOKEN_MAJOR ? work % tokens : work / groups;
  const uint32_t g = TOKEN_MAJOR ? work / tokens : work % groups;
  const int64_t col = (int64_t)g * GROUP + lane * ELEMS;
  pdl_wait<PDL>();
  pdl_trigger<PDL>();

  uint32_t w[ELEMS / 2];  // packed pairs
#pragma unroll
  for (int k = 0; k < LOADS; ++k) {
    const Vec<uint32_t, 4> v = load_ro<uint32_t, 4>(reinterpret_cast<const uint32_t*>(x + t * x_stride + col) + 4 * k);
#pragma unroll
    for (int e = 0; e < 4; ++e) w[4 * k + e] = v.e[e];
  }
  // amax in the 16-bit domain: |v| and max of 16-bit values are exact there
  T2 m = __habs2(as_pair<T2>(w[0]));
#pragma unroll
  for (int k = 1; k < ELEMS / 2; ++k) m = __hmax2(m, __habs2(as_pair<T2>(w[k])));
#pragma unroll
  for (int o = LANES / 2; o > 0; o >>= 1) m = __hmax2(m, as_pair<T2>(__shfl_xor_sync(0xffffffffu, as_word(m), o)));
  const float2 m2 = to_f2(m);
  const float amax = fmaxf(fmaxf(m2.x, m2.y), eps);
  const float scale = amax * (1.0f / FP8_MAX);
  const float q = amax <= 0x1p126f ? __fdividef(FP8_MAX, amax) : __fdiv_rn(FP8_MAX, amax);

  Vec<uint32_t, ELEMS / 4> out;
#pragma unroll
  for (int k = 0; k < ELEMS / 4; ++k) {
    const uint32_t lo = fp8x2(to_f2(as_pair<T2>(w[2 * k])), q);
    const uint32_t hi = fp8x2(to_f2(as_pair<T2>(w[2 * k + 1])), q);
    out.e[k] = lo | (hi << 16);
  }
  store<uint32_t, ELEMS / 4>(reinterpret_cast<uint32_t*>(xq + t * q_stride + col), out);
  if (lane == 0) xs[t * s_token + g * s_group] = scale;
}

// The layouts this kernel takes: group 128, 16-bit x and e4m3 x_q with unit feature strides and 16-byte rows,
// fp32 x_s [T, H/128] with any strides (row- or column-major, padded columns).
static int validate(const AstraTensor* tensors, int num_tensors, const double* scalars, int num_scalars) {
  if (num_tensors != 3 || num_scalars != 4) return ASTRA_UNSUPPORTED;
  const AstraTensor &x = tensors[0], &q = tensors[1], &s = tensors[2];
  const float eps = (float)scalars[1];  // a normal float: 448 / eps stays finite, and the division approximate
  if (scalars[0] != GROUP || !(eps >= 0x1p-126f && eps <= 0x1p126f)) return ASTRA_UNSUPPORTED;
  if (x.ndim != 2 || q.ndim != 2 || s.ndim != 2) return ASTRA_UNSUPPORTED;
  if ((x.dtype != ASTRA_BFLOAT16 && x.dtype != ASTRA_FLOAT16) || q.dtype != ASTRA_FLOAT8_E4M3 ||
      s.dtype != ASTRA_FLOAT32)
    return ASTRA_UNSUPPORTED;
  const int64_t T = x.shape[0], H = x.shape[1];
  if (H % GROUP != 0 || q.shape[0] != T || q.shape[1] != H || s.shape[0] != T || s.shape[1] != H / GROUP)
    return ASTRA_UNSUPPORTED;
  if (T * (H / GROUP) >= ((int64_t)1 << 31)) return ASTRA_UNSUPPORTED;  // 32-bit work index
  if (x.stride[1] != 1 || q.stride[1] != 1 || s.stride[0] < 0 || s.stride[1] < 0) return ASTRA_UNSUPPORTED;
  if ((uintptr_t)x.data % 16 || (uintptr_t)q.data % 16 || (uintptr_t)s.data % 4) return ASTRA_UNSUPPORTED;
  if (T > 1 && (x.stride[0] % 8 || q.stride[0] % 16)) return ASTRA_UNSUPPORTED;
  return ASTRA_OK;
}

}  // namespace

template <int LANES, int THREADS, int PDL>
static int astra_launch_cfg(const AstraTensor* tensors, int num_tensors, const double* scalars, int num_scalars,
                            cudaStream_t stream) {
  const int bad = validate(tensors, num_tensors, scalars, num_scalars);
  if (bad != ASTRA_OK) return bad;
  const AstraTensor &x = tensors[0], &q = tensors[1], &s = tensors[2];
  const uint32_t tokens = (uint32_t)x.shape[0], groups = (uint32_t)(x.shape[1] / GROUP);
  if (tokens == 0 || groups == 0) return ASTRA_OK;  // nothing to do: launch nothing
  const int64_t lanes = (int64_t)tokens * groups * LANES;
  const dim3 grid((unsigned)((lanes + THREADS - 1) / THREADS));
  // column-major scales (token stride 1) of several tokens: consecutive lane sets walk tokens
  const bool token_major = tokens > 1 && s.stride[0] == 1 && s.stride[1] != 1;
  auto run = [&](auto type, auto major) {
    using T = typename decltype(type)::type;
    return launch(group_quant_kernel<T, LANES, THREADS, PDL != 0, decltype(major)::value>, PDL != 0, grid,
                  dim3(THREADS), 0, stream, static_cast<const T*>(x.data), static_cast<uint8_t*>(q.data),
                  static_cast<float*>(s.data), tokens, groups, x.stride[0], q.stride[0], s.stride[0], s.stride[1],
                  (float)scalars[1]);
  };
  const bool bf16 = x.dtype == ASTRA_BFLOAT16;
  if (token_major) return bf16 ? run(Type<__nv_bfloat16>{}, std::true_type{}) : run(Type<__half>{}, std::true_type{});
  return bf16 ? run(Type<__nv_bfloat16>{}, std::false_type{}) : run(Type<__half>{}, std::false_type{});
}

#ifndef ASTRA_NO_DEFAULT_ENTRY
#ifndef ASTRA_DEFAULT_PDL
#define ASTRA_DEFAULT_PDL 1
#endif
// Dispatch: 16 lanes a group (one 16-byte load a lane, the shortest chain per thread); 64-thread blocks while the
// call has few groups (decode: 1-64 tokens of 7168 features are 56-3584 groups), so it spreads over the most SMs;
// 256-thread blocks above, where every SM holds full blocks anyway.
ASTRA_ENTRY {
  constexpr int P = ASTRA_DEFAULT_PDL;
  const int64_t groups = num_tensors == 3 ? tensors[0].shape[0] * (tensors[0].shape[1] / GROUP) : 0;
  if (groups <= 4096) return astra_launch_cfg<16, 64, P>(tensors, num_tensors, scalars, num_scalars, stream);
  return astra_launch_cfg<16, 256, P>(tensors, num_tensors, scalars, num_scalars, stream);
}
#endif
