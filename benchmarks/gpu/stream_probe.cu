// Streaming probe (benchmarks/gpu/stream_sizes.py): the time a kernel with no dependency between its loads
// and its stores takes to move a given number of bytes. Not an op, timing only: READS 16-byte loads per
// vector (from READS arrays), one 16-byte store, VPT vectors per thread all loaded before the first store,
// a 1-D grid of just enough blocks (no grid-stride loop, no tail block beyond the last vector).
// READS 1 moves bytes like a norm (read a row, write a row), READS 2 like silu_and_mul and merge (read two,
// write one). PDL as in the shipped kernels (astra_device.cuh): without it a launch costs ~0.5 us more,
// which at 2-4 us decides whether a shape counts as bounded by its size (session 8, call 1).
#include <stdint.h>
#include "astra_device.cuh"  // launch (PDL attribute), pdl_wait / pdl_trigger

template <int READS, int VPT, bool PDL>
__global__ void stream_kernel(const int4* __restrict__ a, const int4* __restrict__ b, int4* __restrict__ out,
                              int64_t n) {
  pdl_wait<PDL>();
  pdl_trigger<PDL>();
  const int64_t base = (int64_t)blockIdx.x * blockDim.x * VPT + threadIdx.x;
  int4 v[VPT], w[VPT];
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int64_t i = base + (int64_t)k * blockDim.x;
    if (i < n) {
      v[k] = a[i];
      if (READS == 2) w[k] = b[i];
    }
  }
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int64_t i = base + (int64_t)k * blockDim.x;
    if (i < n) {
      if (READS == 2) v[k].x ^= w[k].x, v[k].y ^= w[k].y, v[k].z ^= w[k].z, v[k].w ^= w[k].w;
      out[i] = v[k];
    }
  }
}

template <int READS, int VPT, bool PDL>
static int run(void* out, const void* a, const void* b, int64_t n, int threads, cudaStream_t stream) {
  const int64_t per_block = (int64_t)threads * VPT;
  const int64_t blocks = (n + per_block - 1) / per_block;
  return launch(stream_kernel<READS, VPT, PDL>, PDL, dim3((unsigned)blocks), dim3(threads), 0, stream,
                (const int4*)a, (const int4*)b, (int4*)out, n);
}

template <bool PDL>
static int run_pdl(void* out, const void* a, const void* b, int64_t n, int reads, int threads, int vpt,
                   cudaStream_t stream) {
  switch (reads * 10 + vpt) {
    case 11: return run<1, 1, PDL>(out, a, b, n, threads, stream);
    case 12: return run<1, 2, PDL>(out, a, b, n, threads, stream);
    case 14: return run<1, 4, PDL>(out, a, b, n, threads, stream);
    case 21: return run<2, 1, PDL>(out, a, b, n, threads, stream);
    case 22: return run<2, 2, PDL>(out, a, b, n, threads, stream);
    case 24: return run<2, 4, PDL>(out, a, b, n, threads, stream);
    default: return (int)cudaErrorInvalidValue;
  }
}

// n: 16-byte vectors written (each reads READS vectors); threads: 32..1024; vpt: 1, 2 or 4; pdl: 0 or 1.
extern "C" int astra_stream(void* out, const void* a, const void* b, int64_t n, int reads, int threads, int vpt,
                            int pdl, cudaStream_t stream) {
  return pdl ? run_pdl<true>(out, a, b, n, reads, threads, vpt, stream)
             : run_pdl<false>(out, a, b, n, reads, threads, vpt, stream);
}
