// fused_add_rmsnorm (astra-sglang shipped kernel, hand-written), in place:
//   s = input + residual; residual <- s (rounded to T); input <- s * rsqrt(mean(s^2) + eps) * weight.
// Tensors (spec order): input [T, d] (inplace), residual [T, d] (inplace), weight [d]; scalars: eps.
// Built with -DASTRA_GEMMA=1 it is gemma_fused_add_rmsnorm: the weight applies as 1 + weight (weight_f).
//
// Design (4 * T * d elements moved, a few flops each: memory/latency bound):
//  - Register path: one row per group of THREADS threads (ROWS groups per block), the whole row held in
//    registers, so input and residual are read ONCE, reduced, and both written: the fewest bytes. All
//    of a thread's input, residual and weight loads (VPT 16-byte vectors each) are issued before the first
//    use. The residual is rounded to T as it is stored and the output is computed from that rounded s
//    (the spec allows either; it keeps one packed copy of the row in registers instead of fp32).
//  - Cached-row path, for rows wider than the register path holds (d > THREADS * VPT * vector width):
//    pass 1 reads input and residual once, writes the residual and keeps s in shared memory; pass 2 reads
//    s back and writes the output (WIDE knob: vector pairs in flight per thread). Rows too wide for the
//    GPU's shared memory take the loop path, which re-reads them from L2 in pass 2. Each element is read
//    and written by the same thread, so in-place is safe without a copy of the row.
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
#include "astra_device.cuh"  // conversions, Vec loads/stores, PDL, row sums, launch, smem opt-in, dispatch

namespace {

// Register path: rows of up to THREADS * VPT vectors. blockDim = (THREADS, ROWS).
// With one vector per thread, ask ptxas for a full SM (2048 threads, so <= 32 registers): unbounded, the
// bf16 build took 42-45 registers at 1024 threads, one block per SM, and ran 2048x8192 in 45.2 us against
// 35.6 us for the 32-register fp16 build (H200, 2026-11-21).
template <typename T, int N, int THREADS, int VPT, int ROWS, bool PDL>
__global__ void __launch_bounds__(THREADS * ROWS, VPT == 1 ? 2048 / (THREADS * ROWS) : 1)
far_reg_kernel(T* __restrict__ x, T* __restrict__ res, const T* __restrict__ w, int64_t rows, int nvec, float inv_d,
               int64_t x_stride, int64_t r_stride, float eps) {
  __shared__ float red[ROWS][(THREADS + 31) / 32];
  pdl_wait<PDL>();
  pdl_trigger<PDL>();
  const int tid = threadIdx.x, nthr = blockDim.x;  // nthr: THREADS, or fewer whole warps (FIT)
  for (int64_t base = (int64_t)blockIdx.x * ROWS; base < rows; base += (int64_t)gridDim.x * ROWS) {
    const int64_t r = base + threadIdx.y;
    const bool active = r < rows;  // inactive groups still join the barriers
    T* xr = x + r * x_stride;
    T* rr = res + r * r_stride;
    Vec<T, N> xv[VPT], sv[VPT], wv[VPT];
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int c = k * nthr + tid;
      if (active && c < nvec) {
        xv[k] = load<T, N>(xr + (int64_t)c * N);
        sv[k] = load<T, N>(rr + (int64_t)c * N);
        wv[k] = load_ro<T, N>(w + (int64_t)c * N);
      }
    }
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int c = k * nthr + tid;
      if (active && c < nvec) {
#pragma unroll
        for (int e = 0; e < N; ++e) {
          const float s = elem_f(xv[k], e) + elem_f(sv[k], e);
          sv[k].e[e] = from_f<T>(s);
          ss += s * s;  // fp32 sum (the spec allows rounded or fp32 s for the norm)
        }
        store<T, N>(rr + (int64_t)c * N, sv[k]);  // before the reduction: deferring it was 0-9% slower
      }
    }
    const float rstd = rsqrtf(row_sum<THREADS, ROWS, true>(ss, red) * inv_d + eps);
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int c = k * nthr + tid;
      if (active && c < nvec) {
        Vec<T, N> ov;
#pragma unroll
        for (int e = 0; e < N; ++e) ov.e[e] = from_f<T>(elem_f(sv[k], e) * rstd * weight_f(wv[k], e));
        store<T, N>(xr + (int64_t)c * N, ov);
      }
    }
    if (base + (int64_t)gridDim.x * ROWS < rows) __syncthreads();  // red is rewritten next row
  }
}

// Loop path: any row width, one row per block of THREADS threads.
template <typename T, int N, int THREADS, bool PDL>
__global__ void __launch_bounds__(THREADS, 1)  // ", 1": ptxas otherwise capped 1024 threads at 32 regs and spilled
far_loop_kernel(T* __restrict__ x, T* __restrict__ res, const T* __restrict__ w, int64_t rows, int nvec, float inv_d,
                int64_t x_stride, int64_t r_stride, float eps) {
  __shared__ float red[1][(THREADS + 31) / 32];
  pdl_wait<PDL>();
  pdl_trigger<PDL>();
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    T* xr = x + r * x_stride;
    T* rr = res + r * r_stride;
    float ss = 0.0f;
    for (int c = threadIdx.x; c < nvec; c += THREADS) {
      const Vec<T, N> a = load<T, N>(xr + (int64_t)c * N), b = load<T, N>(rr + (int64_t)c * N);
#pragma unroll
      for (int e = 0; e < N; ++e) {
        const float s = elem_f(a, e) + elem_f(b, e);
        ss += s * s;
      }
    }
    // row_sum's barrier also orders every thread's pass-1 reads before any pass-2 write.
    const float rstd = rsqrtf(row_sum<THREADS, 1>(ss, red) * inv_d + eps);
    for (int c = threadIdx.x; c < nvec; c += THREADS) {
      const Vec<T, N> a = load<T, N>(xr + (int64_t)c * N), b = load<T, N>(rr + (int64_t)c * N);
      const Vec<T, N> wv = load_ro<T, N>(w + (int64_t)c * N);
      Vec<T, N> sv, ov;
#pragma unroll
      for (int e = 0; e < N; ++e) {
        const float s = elem_f(a, e) + elem_f(b, e);
        sv.e[e] = from_f<T>(s);
        ov.e[e] = from_f<T>(elem_f(sv, e) * rstd * weight_f(wv, e));
      }
      store<T, N>(rr + (int64_t)c * N, sv);
      store<T, N>(xr + (int64_t)c * N, ov);
    }
    __syncthreads();  // red is rewritten for the next row
  }
}

// Cached-row path, for rows wider than the register path holds: pass 1 reads input and residual ONCE
// (U vectors of each per thread in flight before the first use), writes the residual and keeps s in
// shared memory; pass 2 reads s back from shared memory instead of re-reading the row from L2. 1024
// threads at <= 32 registers, so two blocks (two rows) fit an SM: at 256 rows on 132 SMs that is one
// wave, not two. (A thread-block-cluster split of each row was 10-20% SLOWER at 256x13824 and 512x14336,
// H200, 2026-11-21; docs/kernels.md.)
template <typename T, int N, int THREADS, int U, int MINB, bool PDL>
__global__ void __launch_bounds__(THREADS, MINB)
far_cache_kernel(T* __restrict__ x, T* __restrict__ res, const T* __restrict__ w, int64_t rows, int nvec, float inv_d,
                 int64_t x_stride, int64_t r_stride, float eps) {
  extern __shared__ __align__(16) unsigned char cache_raw[];
  Vec<T, N>* cache = reinterpret_cast<Vec<T, N>*>(cache_raw);  // s of this block's row, nvec vectors
  __shared__ float red[1][(THREADS + 31) / 32];
  pdl_wait<PDL>();
  pdl_trigger<PDL>();
  const int tid = threadIdx.x;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    T* xr = x + r * x_stride;
    T* rr = res + r * r_stride;
    float ss = 0.0f;
    for (int c0 = tid; c0 < nvec; c0 += THREADS * U) {
      Vec<T, N> a[U], b[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int c = c0 + u * THREADS;
        if (c < nvec) {
          a[u] = load<T, N>(xr + (int64_t)c * N);
          b[u] = load<T, N>(rr + (int64_t)c * N);
        }
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int c = c0 + u * THREADS;
        if (c < nvec) {
#pragma unroll
          for (int e = 0; e < N; ++e) {
            const float s = elem_f(a[u], e) + elem_f(b[u], e);
            b[u].e[e] = from_f<T>(s);
            ss += s * s;
          }
          store<T, N>(rr + (int64_t)c * N, b[u]);
          cache[c] = b[u];  // read back below by this same thread
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
          const Vec<T, N> sv = cache[c];
          Vec<T, N> ov;
#pragma unroll
          for (int e = 0; e < N; ++e) ov.e[e] = from_f<T>(elem_f(sv, e) * rstd * weight_f(wv[u], e));
          store<T, N>(xr + (int64_t)c * N, ov);
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
// at most 1024 threads per block; at 1024 threads (64 registers a thread) at most 2 vectors per thread
// (ptxas: 3 x VPT 16-byte vectors live at the loads).
template <int THREADS, int VPT, int ROWS, int PDL, int WIDE, int FIT, typename T, int N>
static int run(const AstraTensor& in, const AstraTensor& res, const AstraTensor& w, float eps, cudaStream_t stream) {
  constexpr int R = THREADS * ROWS > 1024 ? 1024 / THREADS : ROWS;
  constexpr int V = THREADS * R >= 1024 && VPT > 2 ? 2 : (THREADS * R >= 512 && VPT > 4 ? 4 : VPT);
  const int64_t rows = in.shape[0];
  const int d = (int)in.shape[1], nvec = d / N;
  const float inv_d = 1.0f / (float)d;  // the kernels multiply: no IEEE division (and its slow path) per row
  T* x = static_cast<T*>(in.data);
  T* r = static_cast<T*>(res.data);
  const T* wp = static_cast<const T*>(w.data);
  if (nvec <= THREADS * V) {
    // FIT 1: the fewest whole warps that hold the row at V vectors a thread, not THREADS (at d = 5120,
    // 640 vectors, THREADS 1024 x 1 left 384 threads of every block idle).
    const int per = (nvec + V - 1) / V, fitted = (per + 31) / 32 * 32;
    const int nthr = FIT && fitted < THREADS ? fitted : THREADS;
    const int64_t blocks = (rows + R - 1) / R;
    return launch(far_reg_kernel<T, N, THREADS, V, R, PDL != 0>, PDL != 0,
                  dim3((unsigned)(blocks < kMaxGrid ? blocks : kMaxGrid)), dim3(nthr, R), 0, stream, x, r, wp, rows,
                  nvec, inv_d, in.stride[0], res.stride[0], eps);
  }
  constexpr int LT = THREADS < 256 ? 256 : THREADS;  // wide rows: at least 8 warps
  const dim3 grid((unsigned)(rows < kMaxGrid ? rows : kMaxGrid));
#if ASTRA_ROW_CACHE
  // WIDE = vectors of each operand in flight per thread and step. 1: <= 32 registers, two 1024-thread
  // blocks (rows) per SM; 2: more loads in flight but ~62 registers, one block per SM: for fewer rows than SMs.
  constexpr auto cached = far_cache_kernel<T, N, LT, WIDE, WIDE == 1 ? 2048 / LT : 1, PDL != 0>;
  const size_t bytes = (size_t)nvec * sizeof(Vec<T, N>);
  if (allow_smem<cached>(bytes))
    return launch(cached, PDL != 0, grid, dim3(LT), bytes, stream, x, r, wp, rows, nvec, inv_d, in.stride[0], res.stride[0],
                  eps);
#endif
  return launch(far_loop_kernel<T, N, LT, PDL != 0>, PDL != 0, grid, dim3(LT), 0, stream, x, r, wp, rows, nvec, inv_d,
                in.stride[0], res.stride[0], eps);
}

// The accesses this call's layout allows.
static auto fits(const AstraTensor& in, const AstraTensor& res, const AstraTensor& w) {
  return [&](int64_t elems, int bytes) {
    return access_fits(bytes, elems, in.shape[1], in.shape[0], {in.data, res.data, w.data},
                       {in.stride[0], res.stride[0]});
  };
}

static int validate(const AstraTensor* tensors, int num_tensors, int num_scalars) {
  if (num_tensors != 3 || num_scalars != 1) return ASTRA_UNSUPPORTED;
  const AstraTensor& in = tensors[0];
  const AstraTensor& res = tensors[1];
  const AstraTensor& w = tensors[2];
  if (in.ndim != 2 || res.ndim != 2 || w.ndim != 1) return ASTRA_UNSUPPORTED;
  if (in.dtype != res.dtype || in.dtype != w.dtype) return ASTRA_UNSUPPORTED;
  if (res.shape[0] != in.shape[0] || res.shape[1] != in.shape[1] || w.shape[0] != in.shape[1]) return ASTRA_UNSUPPORTED;
  if (in.shape[1] > 1 && (in.stride[1] != 1 || res.stride[1] != 1 || w.stride[0] != 1)) return ASTRA_UNSUPPORTED;
  if (in.shape[1] >= (int64_t)1 << 31) return ASTRA_UNSUPPORTED;  // column index is 32-bit
  return ASTRA_OK;
}

}  // namespace

template <int THREADS, int VPT, int ROWS, int PDL, int WIDE, int FIT>
static int astra_launch_cfg(const AstraTensor* tensors, int num_tensors, const double* scalars, int num_scalars,
                            cudaStream_t stream) {
  const int bad = validate(tensors, num_tensors, num_scalars);
  if (bad != ASTRA_OK) return bad;
  const AstraTensor& in = tensors[0];
  const AstraTensor& res = tensors[1];
  const AstraTensor& w = tensors[2];
  if (in.shape[0] == 0 || in.shape[1] == 0) return ASTRA_OK;  // empty output: launch nothing
  const float eps = (float)scalars[0];
  return by_dtype(in.dtype, [&](auto type) {
    using T = typename decltype(type)::type;
    return by_access<T>(fits(in, res, w), [&](auto n) {
      return run<THREADS, VPT, ROWS, PDL, WIDE, FIT, T, n.value>(in, res, w, eps, stream);
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
// Hand-chosen dispatch on the row width in vectors (nv, of the width the layout allows). Up to 1024
// vectors (d <= 8192 at 2 bytes): the whole row in registers, ONE vector of each operand per thread, as
// many threads as that takes; narrow rows pack several rows per block. Measured (H200, bf16, 2026-11-21):
// at d = 4096, 512 threads x 1 vector ran 1.94 us at 16 rows and 2.68 us at 128 against 3.35 / 4.04 us
// for 128 threads x 4 vectors, and 67.3 vs 79.9 us at 8192 rows. PDL off cost 0.6 us more at small shapes.
// Wider rows: the cached-row path, 1024 threads; WIDE 2 (more loads in flight, one block per SM) for at
// most 128 rows, WIDE 1 (two blocks per SM) above. Measured (H200, bf16, 2026-11-21, us, ours / flashinfer;
// rows: `git show 1a07363:benchmarks/results/2026-11-21-h200-s3/variants/f2-wide-silucfg.jsonl`): WIDE 1:
// 256x13824 8.88 / 9.27, 512x14336 17.48 / 17.71, 4096x14336 121.5 / 119.7; WIDE 2: 7x8200 3.00 / 3.38,
// 64x13824 4.71 / 4.86, 128x11008 5.39 / 5.63 but 256x13824 10.73. The re-reading loop path: 9.78 at
// 256x13824, 18.51 at 512x14336.
// FIT (H200, 2026-11-21, speedup vs flashinfer; commit fbb4b50, `bash benchmarks/gpu/call_f.sh OUT variants
// fit`): threads cut to the row, e.g. 640 of 1024 at d = 5120: 8192x5120 0.850 -> 0.982, 2048x5120 0.889 ->
// 1.009, 512x5120 0.986 -> 1.079, no shape slower. Rows of 1025-1536 vectors, at most 128 of them: the
// register path with 2 vectors a thread (768 x 2, fitted), 128x11008 1.013 -> 1.183 (cached path before).
// Vectors a thread at d = 5120-8192 (H200, 2026-11-21, us 1 / 2 vectors a thread, fitted, each timed and
// checked; commit 9a32a38, `bash benchmarks/gpu/call_f.sh OUT variants models-cfg`): at most 128 rows of
// 513-1024 vectors take 2 vectors a thread: 1x8192 2.01 / 1.78, 8x8192 2.34 / 2.27, 32x8192 2.57 / 2.53,
// 128x8192 3.91 / 3.83, 1x5120 1.52 / 1.48, 8x5120 1.97 / 1.95 (128x5120 2.93 / 2.95); 512x8192 10.22 /
// 10.44: one vector a thread from 129 rows.
ASTRA_ENTRY {
  const int bad = validate(tensors, num_tensors, num_scalars);
  if (bad != ASTRA_OK) return bad;
  const AstraTensor& in = tensors[0];
  const int64_t vec = access_elems(in.dtype == ASTRA_FLOAT32 ? 4 : 2, fits(in, tensors[1], tensors[2]));
  const int64_t nv = (in.shape[1] + vec - 1) / vec, rows = in.shape[0];
  constexpr int P = ASTRA_DEFAULT_PDL;
#define ASTRA_GO(TH, V, R, W) \
  return astra_launch_cfg<TH, V, R, P, W, ASTRA_DEFAULT_FIT>(tensors, num_tensors, scalars, num_scalars, stream)
  if (nv <= 32) ASTRA_GO(32, 1, 4, 1);
  if (nv <= 64) ASTRA_GO(64, 1, 2, 1);
  if (nv <= 128) ASTRA_GO(128, 1, 1, 1);
  if (nv <= 256) ASTRA_GO(256, 1, 1, 1);
  if (nv <= 512) ASTRA_GO(512, 1, 1, 1);
  if (nv <= 1024 && rows <= 128) ASTRA_GO(1024, 2, 1, 1);  // 2 vectors a thread (above)
  if (nv <= 1024) ASTRA_GO(1024, 1, 1, 1);
  if (nv <= 1536 && rows <= 128) ASTRA_GO(768, 2, 1, 1);  // the register path, fitted: 2 vectors a thread
  if (rows <= 128) ASTRA_GO(1024, 1, 1, 2);  // capacity 1024 < nv: the cached-row path
  ASTRA_GO(1024, 1, 1, 1);
#undef ASTRA_GO
}
#endif
