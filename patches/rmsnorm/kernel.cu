// rmsnorm (astra-sglang shipped kernel, hand-written): out = input * rsqrt(mean(input^2) + eps) * weight.
// Tensors (spec order): input [T, d], weight [d], out [T, d]; scalars: eps.
// Built with -DASTRA_GEMMA=1 it is gemma_rmsnorm: the weight applies as 1 + weight (astra_device.cuh weight_f).
//
// Design (3 * T * d elements moved, a few flops each: memory/latency bound):
//  - Register path: one row per group of THREADS threads (ROWS groups per block), the whole row held in
//    registers: input read ONCE, reduced, output written. All of a thread's input and weight loads
//    (VPT 16-byte vectors each) are issued before the first use.
//  - Cached-row path, for rows wider than the register path holds (d > THREADS * VPT * vector width):
//    pass 1 reads the row once into shared memory and reduces; pass 2 reads it back and writes the output
//    (WIDE knob: vectors in flight per thread). Rows too wide for the GPU's shared memory take the loop
//    path, which re-reads them from L2 in pass 2.
//  - 16-byte vectors when pointers, d and strides allow; else 8-byte ones; else one element per access.
//  - Warp-shuffle reduction; one shared-memory exchange across the warps of a row.
//  - Optional PDL: griddepcontrol.wait before any memory access keeps stream order exact.
//
// Tuner knobs (template parameters of astra_launch_cfg, in this order). The search space is pruned by
// measurement (H200, 2026-11-21, the knob sweep in docs/kernels.md): PDL off cost ~0.6 us in every op; for
// the norms, 32/64 threads and VPT 8 never won, and ROWS > 2 only matters below d = 1024 (no model shape).
// astra:knob THREADS 128 256 512 1024
// astra:knob VPT 1 2 4
// astra:knob ROWS 1 2
// astra:knob PDL 1
// astra:knob WIDE 1 2
// FIT 1: the register path uses the fewest whole warps that hold the row, not THREADS.
// astra:knob FIT 0 1
// TIE 1: the register path's weight loads are issued with x's (see rms_reg_kernel).
// astra:knob TIE 0 1
// LDS 1: the register path's row sum ends with shared-memory reads at <= 256 threads (row_sum LDS).
// astra:knob LDS 0 1
#include "astra_device.cuh"  // conversions, Vec loads/stores, PDL, row sums, launch, smem opt-in, dispatch

namespace {

// The first (up to) 32 bits of a vector, as an integer: a cheap use of a load's result.
template <typename T, int N> __device__ __forceinline__ uint32_t word(const Vec<T, N>& v) {
  uint32_t w = 0;
  __builtin_memcpy(&w, &v, sizeof(v) < 4 ? sizeof(v) : 4);
  return w;
}

// Register path: rows of up to THREADS * VPT vectors. blockDim = (THREADS, ROWS).
// With one vector per thread, ask ptxas for a full SM (2048 threads, so <= 32 registers): unbounded, the
// bf16 build took 42-45 registers at 1024 threads, one block per SM, and ran 2048x8192 in 45.2 us against
// 35.6 us for the 32-register fp16 build (H200, 2026-11-21). With TIE, half an SM (<= 64 registers): the
// weight loads issued up front took bf16 256 x 4 from 64 to 68 registers, 3 blocks per SM instead of 4;
// capped, it is 63 with no spill and the loads still up front (ptxas -v and the SASS).
constexpr int reg_min_blocks(int threads, int vpt, bool tie) {
  const int want = vpt == 1 ? 2048 / threads : tie ? 1024 / threads : 1;
  return want > 0 ? want : 1;
}
// Elements are read through their 32-bit words (elem_f): per-element reads cost the bf16 256 x 4 build 94
// registers (2 blocks per SM) against 62 for fp16; with elem_f both take 64 (4 blocks per SM), and bf16
// 16384x8192 went from 163.1 to 131.7 us (H200, 2026-11-21; rows: `git show
// 1a07363:benchmarks/results/2026-11-21-h200-s5/variants/c1-elem.jsonl`).
template <typename T, int N, int THREADS, int VPT, int ROWS, bool PDL, bool TIE, bool LDS>
__global__ void __launch_bounds__(THREADS * ROWS, reg_min_blocks(THREADS * ROWS, VPT, TIE))
rms_reg_kernel(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ out, int64_t rows, int nvec, float inv_d,
               int64_t x_stride, int64_t o_stride, float eps, uint32_t zero) {
  __shared__ float red[ROWS][(THREADS + 31) / 32];
  pdl_wait<PDL>();
  pdl_trigger<PDL>();
  const int tid = threadIdx.x, nthr = blockDim.x;  // nthr: THREADS, or fewer whole warps (FIT)
  for (int64_t base = (int64_t)blockIdx.x * ROWS; base < rows; base += (int64_t)gridDim.x * ROWS) {
    const int64_t r = base + threadIdx.y;
    const bool active = r < rows;  // inactive groups still join the barriers
    const T* xr = x + r * x_stride;
    T* orow = out + r * o_stride;
    Vec<T, N> xv[VPT], wv[VPT];
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int c = k * nthr + tid;
      if (active && c < nvec) {
        xv[k] = load_ro<T, N>(xr + (int64_t)c * N);
        wv[k] = load<T, N>(w + (int64_t)c * N);  // plain load: ptxas sank .nc ones past the row barrier
      }
    }
    float ss = 0.0f;
    uint32_t tie = 0;  // see `zero` below
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int c = k * nthr + tid;
      if (active && c < nvec) {
        if constexpr (TIE) tie |= word(wv[k]);
#pragma unroll
        for (int e = 0; e < N; ++e) {
          const float v = elem_f(xv[k], e);
          ss += v * v;
        }
      }
    }
    // TIE: `zero` is 0 (from the host), so this adds +0.0f; it makes the row sum depend on the weight loads,
    // so ptxas issues them with x's. Without it, every VPT > 1 build issues them only after x's FMAs (SASS:
    // LDG x4, FFMA x32, then the weight LDGs among the shuffles): a round trip after each row's loads, on
    // its critical path. VPT 1 builds issue them up front anyway (TIE is off there: same SASS as before).
    if constexpr (TIE) ss += __uint_as_float(tie & zero);
    const float rstd = rsqrtf(row_sum<THREADS, ROWS, true, LDS>(ss, red) * inv_d + eps);
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int c = k * nthr + tid;
      if (active && c < nvec) {
        Vec<T, N> ov;
#pragma unroll
        for (int e = 0; e < N; ++e) ov.e[e] = from_f<T>(elem_f(xv[k], e) * rstd * weight_f(wv[k], e));
        store<T, N>(orow + (int64_t)c * N, ov);
      }
    }
    if (base + (int64_t)gridDim.x * ROWS < rows) __syncthreads();  // red is rewritten next row
  }
}

// Loop path: any row width, one row per block of THREADS threads.
template <typename T, int N, int THREADS, bool PDL>
__global__ void __launch_bounds__(THREADS, 1)  // ", 1": ptxas otherwise capped 1024 threads at 32 regs and spilled
rms_loop_kernel(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ out, int64_t rows, int nvec, float inv_d,
                int64_t x_stride, int64_t o_stride, float eps) {
  __shared__ float red[1][(THREADS + 31) / 32];
  pdl_wait<PDL>();
  pdl_trigger<PDL>();
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * x_stride;
    T* orow = out + r * o_stride;
    float ss = 0.0f;
    for (int c = threadIdx.x; c < nvec; c += THREADS) {
      const Vec<T, N> a = load_ro<T, N>(xr + (int64_t)c * N);
#pragma unroll
      for (int e = 0; e < N; ++e) {
        const float v = elem_f(a, e);
        ss += v * v;
      }
    }
    const float rstd = rsqrtf(row_sum<THREADS, 1>(ss, red) * inv_d + eps);
    for (int c = threadIdx.x; c < nvec; c += THREADS) {
      const Vec<T, N> a = load_ro<T, N>(xr + (int64_t)c * N), wv = load_ro<T, N>(w + (int64_t)c * N);
      Vec<T, N> ov;
#pragma unroll
      for (int e = 0; e < N; ++e) ov.e[e] = from_f<T>(elem_f(a, e) * rstd * weight_f(wv, e));
      store<T, N>(orow + (int64_t)c * N, ov);
    }
    __syncthreads();  // red is rewritten for the next row
  }
}

// Cached-row path, for rows wider than the register path holds: pass 1 reads the row ONCE (U vectors
// per thread in flight before the first use) and keeps it in shared memory; pass 2 reads it back from
// shared memory instead of re-reading it from L2. 1024 threads at <= 32 registers, so two blocks (two
// rows) fit an SM. (A thread-block-cluster split of each row was 30-65% SLOWER at 256x13824 and 512x14336,
// H200, 2026-11-21; docs/kernels.md.)
template <typename T, int N, int THREADS, int U, int MINB, bool PDL>
__global__ void __launch_bounds__(THREADS, MINB)
rms_cache_kernel(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ out, int64_t rows, int nvec, float inv_d,
                 int64_t x_stride, int64_t o_stride, float eps) {
  extern __shared__ __align__(16) unsigned char cache_raw[];
  Vec<T, N>* cache = reinterpret_cast<Vec<T, N>*>(cache_raw);  // this block's row, nvec vectors
  __shared__ float red[1][(THREADS + 31) / 32];
  pdl_wait<PDL>();
  pdl_trigger<PDL>();
  const int tid = threadIdx.x;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * x_stride;
    T* orow = out + r * o_stride;
    float ss = 0.0f;
    for (int c0 = tid; c0 < nvec; c0 += THREADS * U) {
      Vec<T, N> a[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int c = c0 + u * THREADS;
        if (c < nvec) a[u] = load_ro<T, N>(xr + (int64_t)c * N);
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int c = c0 + u * THREADS;
        if (c < nvec) {
#pragma unroll
          for (int e = 0; e < N; ++e) {
            const float v = elem_f(a[u], e);
            ss += v * v;
          }
          cache[c] = a[u];  // read back below by this same thread
        }
      }
    }
    const float rstd = rsqrtf(row_sum<THREADS, 1>(ss, red) * inv_d + eps);
    for (int c0 = tid; c0 < nvec; c0 += THREADS * U) {
      Vec<T, N> wv[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int c = c0 + u * THREADS;
        if (c < nvec) wv[u] = load_ro<T, N>(w + (int64_t)c * N);
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int c = c0 + u * THREADS;
        if (c < nvec) {
          const Vec<T, N> xv = cache[c];
          Vec<T, N> ov;
#pragma unroll
          for (int e = 0; e < N; ++e) ov.e[e] = from_f<T>(elem_f(xv, e) * rstd * weight_f(wv[u], e));
          store<T, N>(orow + (int64_t)c * N, ov);
        }
      }
    }
    __syncthreads();  // red is rewritten for the next row
  }
}

constexpr int64_t kMaxGrid = 1 << 20;  // grid-stride beyond this many blocks

#ifndef ASTRA_ROW_CACHE
#define ASTRA_ROW_CACHE 1  // 0: wide rows take the re-reading loop path (no cached-row path)
#endif

// Knob combinations that cannot launch or would spill are clamped here, so every combination is valid:
// at most 1024 threads per block; at 1024 threads (64 registers a thread) at most 2 vectors per thread.
template <int THREADS, int VPT, int ROWS, int PDL, int WIDE, int FIT, int TIE, int LDS, typename T, int N>
static int run(const AstraTensor& in, const AstraTensor& w, const AstraTensor& out, float eps, cudaStream_t stream) {
  constexpr int R = THREADS * ROWS > 1024 ? 1024 / THREADS : ROWS;
  constexpr int V = THREADS * R >= 1024 && VPT > 2 ? 2 : (THREADS * R >= 512 && VPT > 4 ? 4 : VPT);
  const int64_t rows = in.shape[0];
  const int d = (int)in.shape[1], nvec = d / N;
  const float inv_d = 1.0f / (float)d;  // the kernels multiply: no IEEE division (and its slow path) per row
  const T* x = static_cast<const T*>(in.data);
  const T* wp = static_cast<const T*>(w.data);
  T* o = static_cast<T*>(out.data);
  if (nvec <= THREADS * V) {
    // FIT 1: the fewest whole warps that hold the row at V vectors a thread, not THREADS (at d = 5120,
    // 640 vectors, THREADS 1024 x 1 left 384 threads of every block idle).
    const int per = (nvec + V - 1) / V, fitted = (per + 31) / 32 * 32;
    const int nthr = FIT && fitted < THREADS ? fitted : THREADS;
    const int64_t blocks = (rows + R - 1) / R;
    return launch(rms_reg_kernel<T, N, THREADS, V, R, PDL != 0, (TIE != 0 && V > 1),
                                 (LDS != 0 && THREADS > 32 && THREADS <= 256)>, PDL != 0,
                  dim3((unsigned)(blocks < kMaxGrid ? blocks : kMaxGrid)), dim3(nthr, R), 0, stream, x, wp, o, rows,
                  nvec, inv_d, in.stride[0], out.stride[0], eps, 0u);
  }
  constexpr int LT = THREADS < 256 ? 256 : THREADS;  // wide rows: at least 8 warps
  const dim3 grid((unsigned)(rows < kMaxGrid ? rows : kMaxGrid));
#if ASTRA_ROW_CACHE
  // WIDE = vectors of each operand in flight per thread and step. 1: <= 32 registers, two 1024-thread
  // blocks (rows) per SM; 2: more loads in flight but ~62 registers, one block per SM: for fewer rows than SMs.
  constexpr auto cached = rms_cache_kernel<T, N, LT, WIDE, WIDE == 1 ? 2048 / LT : 1, PDL != 0>;
  const size_t bytes = (size_t)nvec * sizeof(Vec<T, N>);
  if (allow_smem<cached>(bytes))
    return launch(cached, PDL != 0, grid, dim3(LT), bytes, stream, x, wp, o, rows, nvec, inv_d, in.stride[0], out.stride[0],
                  eps);
#endif
  return launch(rms_loop_kernel<T, N, LT, PDL != 0>, PDL != 0, grid, dim3(LT), 0, stream, x, wp, o, rows, nvec, inv_d,
                in.stride[0], out.stride[0], eps);
}

// The accesses this call's layout allows.
static auto fits(const AstraTensor& in, const AstraTensor& w, const AstraTensor& out) {
  return [&](int64_t elems, int bytes) {
    return access_fits(bytes, elems, in.shape[1], in.shape[0], {in.data, w.data, out.data},
                       {in.stride[0], out.stride[0]});
  };
}

static int validate(const AstraTensor* tensors, int num_tensors, int num_scalars) {
  if (num_tensors != 3 || num_scalars != 1) return ASTRA_UNSUPPORTED;
  const AstraTensor& in = tensors[0];
  const AstraTensor& w = tensors[1];
  const AstraTensor& out = tensors[2];
  if (in.ndim != 2 || out.ndim != 2 || w.ndim != 1) return ASTRA_UNSUPPORTED;
  if (in.dtype != w.dtype || in.dtype != out.dtype) return ASTRA_UNSUPPORTED;
  if (out.shape[0] != in.shape[0] || out.shape[1] != in.shape[1] || w.shape[0] != in.shape[1]) return ASTRA_UNSUPPORTED;
  if (in.shape[1] > 1 && (in.stride[1] != 1 || out.stride[1] != 1 || w.stride[0] != 1)) return ASTRA_UNSUPPORTED;
  if (in.shape[1] >= (int64_t)1 << 31) return ASTRA_UNSUPPORTED;  // column index is 32-bit
  return ASTRA_OK;
}

}  // namespace

template <int THREADS, int VPT, int ROWS, int PDL, int WIDE, int FIT, int TIE = 1, int LDS = 1>
static int astra_launch_cfg(const AstraTensor* tensors, int num_tensors, const double* scalars, int num_scalars,
                            cudaStream_t stream) {
  const int bad = validate(tensors, num_tensors, num_scalars);
  if (bad != ASTRA_OK) return bad;
  const AstraTensor& in = tensors[0];
  const AstraTensor& w = tensors[1];
  const AstraTensor& out = tensors[2];
  if (in.shape[0] == 0 || in.shape[1] == 0) return ASTRA_OK;  // empty output: launch nothing
  const float eps = (float)scalars[0];
  return by_dtype(in.dtype, [&](auto type) {
    using T = typename decltype(type)::type;
    return by_access<T>(fits(in, w, out), [&](auto n) {
      return run<THREADS, VPT, ROWS, PDL, WIDE, FIT, TIE, LDS, T, n.value>(in, w, out, eps, stream);
    });
  });
}

#ifndef ASTRA_NO_DEFAULT_ENTRY
#ifndef ASTRA_DEFAULT_FIT
#define ASTRA_DEFAULT_FIT 1
#endif
#ifndef ASTRA_DEFAULT_PDL
#define ASTRA_DEFAULT_PDL 1
#endif
// Hand-chosen dispatch on the row width in vectors (nv, of the width the layout allows), from the knob
// sweep (H200, bf16, 2026-11-21; us, ours vs sgl_kernel):
//  - rows up to 1024 vectors (d <= 8192 at 2 bytes): whole row in registers, up to 4 vectors of each
//    operand per thread (8 loads in flight), the fewest threads that hold it; narrow rows pack several
//    rows per block. 8192x4096: 36.96 (128 x 4) vs 47.95 (512 x 1); 2048x8192: 21.6 (256 x 4) vs 37.3
//    (1024 x 1); sgl_kernel 45.6 and 26.9.
//  - few short rows (<= 128 rows, d 2049-4096): 256 threads x 2 vectors, 2.08 vs 2.23 (128 x 4) at
//    128x4096.
//  - wider rows: the cached-row path; at most 128 rows: 1024 threads, WIDE 2 (more loads in flight, one
//    block per SM): 3.78 / 4.17 at 128x11008, 3.42 / 3.95 at 64x13824, 2.70 / 2.94 at 7x8200; more rows:
//    512 threads, WIDE 1: 6.38 / 6.11 at 256x13824, 10.58 / 11.39 at 512x14336, 66.0 / 80.2 at 4096x14336
//    (rows: `git show 1a07363:benchmarks/results/2026-11-21-h200-s3/variants/f2-wide-silucfg.jsonl`). The
//    two-pass loop path (second read from L2, 256 threads): 6.43 / 6.05 at 256x13824, 4.37 / 4.20 at 128x11008.
//  - FIT (speedup vs flashinfer; commit fbb4b50, `bash benchmarks/gpu/call_f.sh OUT variants fit`): threads
//    cut to the row, e.g. 160 of 256 (x 4 vectors) at d = 5120: 16384x5120 0.871 -> 1.240, 8192x5120 0.884
//    -> 1.302, 2048x5120 0.905 -> 1.222, 640x6144 1.088 -> 1.304. At most 128 rows of 1025-1536 vectors:
//    the register path, 768 x 2 fitted, 128x11008 1.061 -> 1.226 (cached path before).
//  - elem_f (64 registers at 256 x 4; speedup vs flashinfer, rows: `git show 1a07363:benchmarks/results/
//    2026-11-21-h200-s5/variants/c1-elem.jsonl`, plan elem-cfg): 129-256 rows
//    of 1025-2048 vectors take the register path 512 x 4 fitted (256x11008 1.144 vs 1.096 cached, 256x13824
//    1.103 vs 1.069); more rows keep the cached path (512x14336 1.176 vs 1.113).
//  - TIE (us untied / tied; commit f253450, `OPS=rmsnorm bash benchmarks/gpu/call_f.sh OUT variants tie`;
//    every VPT > 1 path tied): above 2^21 elements faster at all 18 shapes on those paths, 1024x4096 6.01 / 5.55,
//    1024x8192 10.94 / 10.09, 2048x8192 19.02 / 18.09, 2048x4096 10.59 / 9.68, 512x8192 6.16 / 5.76,
//    256x13824 5.50 / 5.40, >= 8192 rows 1-2%; at or below it, 1-4% slower at 11 of 23 shapes (512x4096
//    3.97 / 4.05, 512x3584 3.62 / 3.75, 128x8192 2.85 / 2.94, 1x4096 1.22 / 1.26) and 2-4% faster at the
//    four 8-row shapes (8x5120 2.01 / 1.93): untied there.
//  - LDS (us without / with, on top of TIE; commit 0202dac, `OPS=rmsnorm bash benchmarks/gpu/call_f.sh OUT
//    variants lds`): faster at 17 of 20 shapes,
//    128x4096 2.15 / 2.08 (1.299 -> 1.355x), 256x4096 2.83 / 2.69, 128x3584 2.10 / 1.96, 1024x4096 5.70 /
//    5.49, 2048x4096 9.92 / 9.51, 8x4096 1.76 / 1.68; even at 512x14336 (cached path, unchanged); slower at
//    512x4096 3.92 / 4.16 and 512x3584 3.58 / 3.82 (the untied 128 x 4 build; the time step agrees, 3.89 /
//    4.13), where it is off: above 256 rows on that path (256x4096 gains on it).
//  - Model widths (us, former dispatch / now, fixed configurations tied, each timed and checked; commit
//    9a32a38, `bash benchmarks/gpu/call_f.sh OUT variants models-cfg`): 257-512 rows of <= 512 vectors, the
//    untied 128 x 4 build above, now 1024 x 1 fitted (one vector a thread): 512x4096 3.91 / 3.64, 512x3584 3.62 / 3.41.
//    Rows of 513-640 vectors (d = 5120 at 2 bytes; the 160 x 4 build before): <= 128 rows 1024 x 1 fitted
//    (1x5120 1.41 / 1.30, 8x5120 1.98 / 1.77, 32x5120 2.11 / 1.97, 128x5120 2.49 / 2.34), <= 512 rows
//    1024 x 2 fitted (512x5120 4.89 / 4.25; 1024 x 1 there 5.07); from 2048 rows 256 x 4 stays best
//    (2048x5120 11.96 vs 13.15). Measured at 640 vectors only; d = 8192 (1024 vectors) is best as it was.
ASTRA_ENTRY {
  const int bad = validate(tensors, num_tensors, num_scalars);
  if (bad != ASTRA_OK) return bad;
  const AstraTensor& in = tensors[0];
  const int64_t vec = access_elems(in.dtype == ASTRA_FLOAT32 ? 4 : 2, fits(in, tensors[1], tensors[2]));
  const int64_t nv = (in.shape[1] + vec - 1) / vec, rows = in.shape[0];
  constexpr int P = ASTRA_DEFAULT_PDL;
  const bool tie = rows * in.shape[1] > ((int64_t)1 << 21);
#define ASTRA_CFG(TH, V, R, W, TIE, LDS) \
  astra_launch_cfg<TH, V, R, P, W, ASTRA_DEFAULT_FIT, TIE, LDS>(tensors, num_tensors, scalars, num_scalars, stream)
#define ASTRA_GO(TH, V, R, W) return tie ? ASTRA_CFG(TH, V, R, W, 1, 1) : ASTRA_CFG(TH, V, R, W, 0, 1)
  if (nv <= 32) ASTRA_GO(32, 1, 4, 1);
  if (nv <= 64) ASTRA_GO(32, 2, 4, 1);
  if (nv <= 128) ASTRA_GO(32, 4, 2, 1);
  if (nv <= 256) ASTRA_GO(64, 4, 1, 1);
  if (nv <= 512) {
    if (rows <= 128) ASTRA_GO(256, 2, 1, 1);
    if (rows > 256 && !tie) return ASTRA_CFG(1024, 1, 1, 1, 1, 1);  // one vector a thread, tied as measured
    ASTRA_GO(128, 4, 1, 1);
  }
  // 1-2 vectors a thread at d = 5120, tied as measured (model widths, above)
  if (nv <= 640 && rows <= 128) return ASTRA_CFG(1024, 1, 1, 1, 1, 1);
  if (nv <= 640 && rows <= 512) return ASTRA_CFG(1024, 2, 1, 1, 1, 1);
  if (nv <= 1024) ASTRA_GO(256, 4, 1, 1);
  if (nv <= 1536 && rows <= 128) ASTRA_GO(768, 2, 1, 1);  // the register path, fitted: 2 vectors a thread
  if (nv <= 2048 && rows <= 256) ASTRA_GO(512, 4, 1, 1);  // the register path, fitted: 4 vectors a thread
  if (rows <= 128) ASTRA_GO(1024, 1, 1, 2);  // capacity < nv: the cached-row path
  ASTRA_GO(512, 1, 1, 1);
#undef ASTRA_GO
#undef ASTRA_CFG
}
#endif
