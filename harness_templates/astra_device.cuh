// astra-sglang helpers shared by the shipped kernels (patches/<op>/kernel.cu). Device: conversions, one-access
// vector loads/stores, the norms' weight (plain or Gemma's 1 + w), the gated activations, PDL, warp and row
// sums. Host: the launch with optional PDL, the dynamic shared-memory opt-in, the widest access a call's layout
// allows, and the dtype dispatch. Kernel files include it
// (`#include "astra_device.cuh"`, which brings astra_abi.h); it is part of every build's cache key.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <initializer_list>
#include <type_traits>
#include "astra_abi.h"

namespace {

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ float from_f<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_f<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// N elements of T moved as ONE access of N * sizeof(T) bytes (16 on the vector path, 8 on the half-vector
// path for widths that are a multiple of 4 but not 8 elements, e.g. d = 4100). Explicit PTX
// vector instructions: built from memcpy'd structs, nvcc split some 16-byte stores into 4-byte ones
// (fp32 and merge paths, seen in the SASS). load_ro: read-only data (non-coherent path); load/store:
// volatile with a memory clobber, so in-place reads stay ordered before the writes that follow them.
template <typename T, int N> struct alignas(sizeof(T) * N) Vec { T e[N]; };

template <typename T, int N> __device__ __forceinline__ Vec<T, N> load_ro(const T* p) {
  Vec<T, N> v;
  if constexpr (sizeof(T) * N == 16) {
    uint32_t w[4];
    asm("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3]) : "l"(p));
    __builtin_memcpy(&v, w, 16);
  } else if constexpr (sizeof(T) * N == 8) {
    uint32_t w[2];
    asm("ld.global.nc.v2.u32 {%0, %1}, [%2];" : "=r"(w[0]), "=r"(w[1]) : "l"(p));
    __builtin_memcpy(&v, w, 8);
  } else {
#pragma unroll
    for (int e = 0; e < N; ++e) v.e[e] = p[e];
  }
  return v;
}
template <typename T, int N> __device__ __forceinline__ Vec<T, N> load(const T* p) {
  Vec<T, N> v;
  if constexpr (sizeof(T) * N == 16) {
    uint32_t w[4];
    asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3]) : "l"(p) : "memory");
    __builtin_memcpy(&v, w, 16);
  } else if constexpr (sizeof(T) * N == 8) {
    uint32_t w[2];
    asm volatile("ld.global.v2.u32 {%0, %1}, [%2];" : "=r"(w[0]), "=r"(w[1]) : "l"(p) : "memory");
    __builtin_memcpy(&v, w, 8);
  } else {
#pragma unroll
    for (int e = 0; e < N; ++e) v.e[e] = p[e];
  }
  return v;
}
template <typename T, int N> __device__ __forceinline__ void store(T* p, const Vec<T, N>& v) {
  if constexpr (sizeof(T) * N == 16) {
    uint32_t w[4];
    __builtin_memcpy(w, &v, 16);
    asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" :: "l"(p), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3])
                 : "memory");
  } else if constexpr (sizeof(T) * N == 8) {
    uint32_t w[2];
    __builtin_memcpy(w, &v, 8);
    asm volatile("st.global.v2.u32 [%0], {%1, %2};" :: "l"(p), "r"(w[0]), "r"(w[1]) : "memory");
  } else {
#pragma unroll
    for (int e = 0; e < N; ++e) p[e] = v.e[e];
  }
}

// Element e of a vector as float, read through its 32-bit word (2-byte types): the vector stays in packed
// registers. Per-element 16-bit reads (to_f(v.e[e])) made nvcc move every high half into a register of its
// own right after the load: 16 more live registers in the norms' 4-vector register path (bf16 SASS, PRMT).
template <typename T, int N> __device__ __forceinline__ float elem_f(const Vec<T, N>& v, int e) {
  if constexpr (sizeof(T) == 2 && N % 2 == 0) {
    uint32_t w;
    __builtin_memcpy(&w, &v.e[e & ~1], 4);
    if constexpr (std::is_same_v<T, __nv_bfloat16>) return __uint_as_float(e & 1 ? w & 0xffff0000u : w << 16);
    else return __half2float(__ushort_as_half((unsigned short)(e & 1 ? w >> 16 : w & 0xffffu)));
  } else {
    return to_f(v.e[e]);
  }
}

// The norms' weight as float: w, or 1 + w where ASTRA_GEMMA=1 (SGLang's GemmaRMSNorm: x / rms(x) * (1 + w)).
// The gemma_rmsnorm / gemma_fused_add_rmsnorm patches build rmsnorm's / fused_add_rmsnorm's file with it
// (their manifests' defines); `if constexpr` leaves the plain builds' code as it was.
#ifndef ASTRA_GEMMA
#define ASTRA_GEMMA 0
#endif
template <typename T, int N> __device__ __forceinline__ float weight_f(const Vec<T, N>& v, int e) {
  if constexpr (ASTRA_GEMMA != 0) return 1.0f + elem_f(v, e);
  else return elem_f(v, e);
}

// Gated-MLP activations in fp32, act(g) * u, as types (their names show in the kernels' names in a trace).
// ASTRA_ACT picks the one a build runs: 0 silu (silu_and_mul), 1 gelu with erf (gelu_and_mul), 2 gelu's tanh
// approximation (gelu_tanh_and_mul); the gelu patches build silu_and_mul's file with it.
// Silu: __expf (ex2.approx, relative error ~2^-21 plus |g| * 2^-24 from scaling); __fdividef (2 ulp) returns 0
// once 1 + e^-g > 2^126 (g < -87), where the exact result is below 1e-36: no IEEE-division slow path.
struct Silu {
  static __device__ __forceinline__ float apply(float g, float u) { return __fdividef(g, 1.0f + __expf(-g)) * u; }
};
// Gelu: g * Phi(g) = g * erfc(-g / sqrt 2) / 2; erfcf keeps its relative accuracy where Phi is tiny (g << 0),
// where 1 + erf would cancel.
struct Gelu {
  static __device__ __forceinline__ float apply(float g, float u) {
    return 0.5f * g * erfcf(-0.70710678118654752f * g) * u;
  }
};
// PyTorch's tanh approximation: g / 2 * (1 + tanh(y)), y = sqrt(2 / pi) * (g + 0.044715 g^3), computed as
// g * sigmoid(2y) (the same value): no cancellation in 1 + tanh(y) for g << 0, and the Silu path's __expf.
struct GeluTanh {
  static __device__ __forceinline__ float apply(float g, float u) {
    const float y2 = 1.5957691216057308f * fmaf(0.044715f * g, g * g, g);  // 2y
    return __fdividef(g, 1.0f + __expf(-y2)) * u;
  }
};
#ifndef ASTRA_ACT
#define ASTRA_ACT 0
#endif
using Act = std::conditional_t<ASTRA_ACT == 1, Gelu, std::conditional_t<ASTRA_ACT == 2, GeluTanh, Silu>>;

template <bool PDL> __device__ __forceinline__ void pdl_wait() {
  if constexpr (PDL) asm volatile("griddepcontrol.wait;" ::: "memory");
}
template <bool PDL> __device__ __forceinline__ void pdl_trigger() {
  if constexpr (PDL) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over the threads of row group threadIdx.y; every thread gets the total. red[ROWS][WARPS].
// The caller must __syncthreads() before red is written again.
// FITTED (the register path): blockDim.x may be below THREADS, and the second level runs in registers, lane
// w taking warp w's sum, so every thread ends with the same total (one smem read, 5 shuffles). The
// 32 unrolled smem reads of the fixed-width form cost the 32-register fitted builds a spill (ptxas -v);
// the loop and cached-row kernels keep that form, where the butterfly made the 1024-thread build spill.
// LDS (fitted only, at most 8 warps): every thread sums the warp sums read from shared memory, in warp order,
// instead of 5 more dependent shuffles; the reads issue back to back (used by rmsnorm).
template <int THREADS, int ROWS, bool FITTED = false, bool LDS = false>
__device__ __forceinline__ float row_sum(float v, float (*red)[(THREADS + 31) / 32]) {
  v = warp_sum(v);
  if constexpr (THREADS > 32) {
    constexpr int WARPS = THREADS / 32;
    static_assert(WARPS <= 32, "one warp reduces the warp sums");
    static_assert(!LDS || (FITTED && WARPS <= 8), "LDS: the fitted register path with at most 8 warps");
    if (threadIdx.x % 32 == 0) red[threadIdx.y][threadIdx.x / 32] = v;
    __syncthreads();
    if constexpr (LDS) {
      const int nwarps = (int)(blockDim.x / 32);
      v = red[threadIdx.y][0];
#pragma unroll
      for (int w = 1; w < WARPS; ++w) v += w < nwarps ? red[threadIdx.y][w] : 0.0f;
    } else if constexpr (FITTED) {
      const int lane = threadIdx.x % 32;
      v = warp_sum(lane < (int)(blockDim.x / 32) ? red[threadIdx.y][lane] : 0.0f);
    } else {
      v = 0.0f;
#pragma unroll
      for (int w = 0; w < WARPS; ++w) v += red[threadIdx.y][w];  // broadcast reads, fixed order
    }
  }
  return v;
}

// Dynamic shared memory above the default 48 KiB must be opted into, once per kernel and size.
template <auto Kernel>
static bool allow_smem(size_t bytes) {
  static size_t allowed = 48 * 1024;
  if (bytes <= allowed) return true;
  if (cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes) != cudaSuccess) {
    (void)cudaGetLastError();  // too large for this GPU: the caller takes the re-reading loop path
    return false;
  }
  allowed = bytes;
  return true;
}

// PDL: the launch lets this grid start while the previous one drains (its griddepcontrol.wait keeps order).
template <typename K, typename... Args>
static int launch(K kernel, bool pdl, dim3 grid, dim3 block, size_t smem, cudaStream_t stream, Args... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = pdl ? attr : nullptr;
  cfg.numAttrs = pdl ? 1 : 0;
  const cudaError_t err = cudaLaunchKernelEx(&cfg, kernel, args...);
  return err == cudaSuccess ? (int)cudaGetLastError() : (int)err;
}

// An access of `elems` elements (`bytes` bytes) fits a call when every base is `bytes`-aligned and every row
// starts on a whole access: the row width and, unless there is one row, each row stride a multiple of elems.
static bool access_fits(int bytes, int64_t elems, int64_t width, int64_t rows, std::initializer_list<const void*> bases,
                        std::initializer_list<int64_t> row_strides) {
  for (const void* b : bases)
    if ((uintptr_t)b % bytes != 0) return false;
  if (width % elems != 0) return false;
  if (rows == 1) return true;
  for (int64_t s : row_strides)
    if (s % elems != 0) return false;
  return true;
}

// The widest access `fits(elems, bytes)` allows for elements of `size` bytes: 16 bytes, else 8, else one element.
template <typename Fits> static int64_t access_elems(int64_t size, Fits fits) {
  return fits(16 / size, 16) ? 16 / size : fits(8 / size, 8) ? 8 / size : 1;
}

// run(std::integral_constant<int, N>) with N the elements of T in the widest access `fits` allows.
template <typename T, typename Fits, typename Run> static int by_access(Fits fits, Run run) {
  constexpr int V16 = 16 / (int)sizeof(T);
  if (fits(V16, 16)) return run(std::integral_constant<int, V16>{});
  if (fits(V16 / 2, 8)) return run(std::integral_constant<int, V16 / 2>{});
  return run(std::integral_constant<int, 1>{});
}

// run(Type<T>{}) with T the C++ type of an ASTRA_* dtype; ASTRA_UNSUPPORTED for any other dtype.
template <typename T> struct Type { using type = T; };
template <typename Run> static int by_dtype(int dtype, Run run) {
  switch (dtype) {
    case ASTRA_FLOAT32: return run(Type<float>{});
    case ASTRA_FLOAT16: return run(Type<__half>{});
    case ASTRA_BFLOAT16: return run(Type<__nv_bfloat16>{});
    default: return ASTRA_UNSUPPORTED;
  }
}

}  // namespace
