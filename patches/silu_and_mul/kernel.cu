// silu_and_mul (astra-sglang shipped kernel, hand-written): out[t, j] = silu(x[t, j]) * x[t, d + j],
// x = input [T, 2d], out [T, d]; fp32 math, any d, any row stride. Built with -DASTRA_ACT=1 it is
// gelu_and_mul (erf), with -DASTRA_ACT=2 gelu_tanh_and_mul (the activations: astra_device.cuh).
//
// Design (the op moves 3 * T * d elements and does ~10 flops each: memory/latency bound):
//  - 2-D grid: blockIdx.y walks rows, blockIdx.x a chunk of THREADS * VPT vectors of one row, so a
//    decode-sized call (1-64 rows) still spreads over many SMs and every load is issued up front.
//  - 16-byte vector loads/stores when pointers, d and row strides allow it; else 8-byte ones (d % 8 == 4
//    at 2 bytes); otherwise the same kernel with one element per "vector" (odd d, d = 1, unaligned views).
//  - Rows narrower than THREADS * VPT vectors get blocks of just enough threads (blockDim set at launch).
//  - VPT independent gate+up loads per thread in flight before the first use.
//  - Optional PDL (programmatic dependent launch): the grid waits on griddepcontrol.wait before touching
//    memory, so ordering with the previous kernel on the stream is unchanged; only the launch overlaps.
//
// Tuner knobs (template parameters of astra_launch_cfg, in this order). PDL stays on: off cost ~0.6 us
// at small shapes in every op (H200, 2026-11-21, the knob sweep in docs/kernels.md).
// astra:knob THREADS 64 128 256 512
// astra:knob VPT 1 2 4
// astra:knob PDL 1
#include "astra_device.cuh"  // conversions, Vec loads/stores, PDL, launch, access width, dtype dispatch

namespace {

// A = Act (astra_device.cuh): Silu, Gelu or GeluTanh, chosen by ASTRA_ACT.
template <typename A, typename T, int N, int THREADS, int VPT, bool PDL>
__global__ void __launch_bounds__(THREADS)
act_mul_kernel(const T* __restrict__ in, T* __restrict__ out, int64_t rows, int nvec, int64_t d,
               int64_t in_stride, int64_t out_stride) {
  pdl_wait<PDL>();
  pdl_trigger<PDL>();
  const int nt = blockDim.x;  // THREADS, or fewer for rows narrower than THREADS * VPT vectors
  const int col0 = blockIdx.x * (nt * VPT) + threadIdx.x;  // in vectors of N elements
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const T* gate = in + r * in_stride;
    const T* up = gate + d;
    T* o = out + r * out_stride;
    Vec<T, N> gv[VPT], uv[VPT];
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int c = col0 + k * nt;
      if (c < nvec) {
        gv[k] = load_ro<T, N>(gate + (int64_t)c * N);
        uv[k] = load_ro<T, N>(up + (int64_t)c * N);
      }
    }
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int c = col0 + k * nt;
      if (c < nvec) {
        Vec<T, N> ov;
#pragma unroll
        for (int e = 0; e < N; ++e) {
          // 256-thread blocks read elements through their 32-bit words (elem_f), 64-thread ones per element:
          // each form won in its own range (H200, 2026-11-21, speedup vs SGLang, same build per block size:
          // 128x11008 0.968 -> 1.032x and 128x14336 0.981 -> 1.020x with elem_f at 256 threads, 8x28672
          // 1.145 -> 1.091x at 64 threads, where its build differed; rows: `git show
          // 1a07363:benchmarks/results/2026-11-21-h200-s5/variants/c1-elem.jsonl`).
          const float g = THREADS >= 256 ? elem_f(gv[k], e) : to_f(gv[k].e[e]);
          const float u = THREADS >= 256 ? elem_f(uv[k], e) : to_f(uv[k].e[e]);
          ov.e[e] = from_f<T>(A::apply(g, u));
        }
        store<T, N>(o + (int64_t)c * N, ov);
      }
    }
  }
}

// A row narrower than THREADS * VPT vectors gets blocks of just enough threads (a multiple of 32): at
// 4000x2816 a 512 x 2 configuration otherwise left 336 of every 512 threads idle (0.73x, tuner run 2026-11-21).
template <typename T, int N, int THREADS, int VPT, int PDL>
static int run(const AstraTensor& in, const AstraTensor& out, cudaStream_t stream) {
  const int64_t rows = out.shape[0], d = out.shape[1];
  const int nvec = (int)(d / N);
  const int want = ((nvec + VPT - 1) / VPT + 31) / 32 * 32;
  const int nt = want < THREADS ? want : THREADS;
  const int64_t chunks = (nvec + nt * VPT - 1) / (nt * VPT);
  const dim3 grid((unsigned)chunks, (unsigned)(rows < 65535 ? rows : 65535));
  return launch(act_mul_kernel<Act, T, N, THREADS, VPT, PDL != 0>, PDL != 0, grid, dim3(nt), 0, stream,
                static_cast<const T*>(in.data), static_cast<T*>(out.data), rows, nvec, d, in.stride[0], out.stride[0]);
}

// The accesses this call's layout allows (8 bytes where d % 8 == 4 at 2 bytes, e.g. 4100).
static auto fits(const AstraTensor& in, const AstraTensor& out) {
  return [&](int64_t elems, int bytes) {
    return access_fits(bytes, elems, out.shape[1], out.shape[0], {in.data, out.data}, {in.stride[0], out.stride[0]});
  };
}

// Validation shared by the default entry and the tuner's entry: the layouts our first kernel accepts.
static int validate(const AstraTensor* tensors, int num_tensors, int num_scalars) {
  if (num_tensors != 2 || num_scalars != 0) return ASTRA_UNSUPPORTED;
  const AstraTensor& in = tensors[0];
  const AstraTensor& out = tensors[1];
  if (in.ndim != 2 || out.ndim != 2 || in.dtype != out.dtype) return ASTRA_UNSUPPORTED;
  if (in.shape[0] != out.shape[0] || in.shape[1] != 2 * out.shape[1]) return ASTRA_UNSUPPORTED;
  if ((in.shape[1] > 1 && in.stride[1] != 1) || (out.shape[1] > 1 && out.stride[1] != 1)) return ASTRA_UNSUPPORTED;
  if (out.shape[1] >= (int64_t)1 << 31) return ASTRA_UNSUPPORTED;  // vector index is 32-bit
  return ASTRA_OK;
}

}  // namespace

template <int THREADS, int VPT, int PDL>
static int astra_launch_cfg(const AstraTensor* tensors, int num_tensors, const double* scalars, int num_scalars,
                            cudaStream_t stream) {
  (void)scalars;
  const int bad = validate(tensors, num_tensors, num_scalars);
  if (bad != ASTRA_OK) return bad;
  const AstraTensor& in = tensors[0];
  const AstraTensor& out = tensors[1];
  if (out.shape[0] == 0 || out.shape[1] == 0) return ASTRA_OK;  // nothing to do: launch nothing
  return by_dtype(in.dtype, [&](auto type) {
    using T = typename decltype(type)::type;
    return by_access<T>(fits(in, out), [&](auto n) { return run<T, n.value, THREADS, VPT, PDL>(in, out, stream); });
  });
}

#ifndef ASTRA_NO_DEFAULT_ENTRY
#ifndef ASTRA_DEFAULT_PDL
#define ASTRA_DEFAULT_PDL 1
#endif
// Hand-chosen dispatch, one vector per thread, block size by the call's total vectors V (rows x d / vector
// width), from a configuration sweep (H200, 2026-11-21, us, ours / SGLang; the rows: `git show
// 1a07363:benchmarks/results/2026-11-21-h200-s3/variants/f2-wide-silucfg.jsonl`): up to 128K vectors, 64
// threads win (bf16 16x4096 1.44 / 1.72, 64x14336 2.72 / 2.90, 100x9728 2.82 / 2.92; 128 threads: 1.45,
// 2.84, 2.91); above, 64-thread blocks lose badly (fp32 64x14336 4.74 / 3.93, bf16 512x14336 17.9 / 11.6)
// and 256 threads are within 1% of the best at every shape measured (333x12288 7.19 / 7.02, 512x14336
// 11.81 / 11.57, 4000x2816 17.07 / 16.95, 8192x14336 162.6 / 162.6). A nearest-shape table of the tuner's
// sent held-out and model shapes to 64-thread or 512 x 2 configurations: 4000x2816 0.73x, 128x18944 0.76x,
// fp32 100x9728 0.82x.
ASTRA_ENTRY {
  const int bad = validate(tensors, num_tensors, num_scalars);
  if (bad != ASTRA_OK) return bad;
  const AstraTensor& in = tensors[0];
  const AstraTensor& out = tensors[1];
  const int64_t vec = access_elems(in.dtype == ASTRA_FLOAT32 ? 4 : 2, fits(in, out));
  const int64_t vectors = out.shape[0] * ((out.shape[1] + vec - 1) / vec);
  constexpr int P = ASTRA_DEFAULT_PDL;
  if (vectors <= ((int64_t)1 << 17)) return astra_launch_cfg<64, 1, P>(tensors, num_tensors, scalars, num_scalars, stream);
  return astra_launch_cfg<256, 1, P>(tensors, num_tensors, scalars, num_scalars, stream);
}
#endif
