// silu_and_mul: out[t, j] = silu(x[t, j]) * x[t, d + j], x = input[T, 2d], out[T, d].
// Baseline kernel (our own): one block per row (grid-stride over rows), threads stride over the
// columns, fp32 math, no vectorization, so any d (including 1 and odd) and any row stride work.
// Built with -DASTRA_ACT=1 / 2 it is gelu_and_mul's / gelu_tanh_and_mul's first kernel (the activations, fp32,
// the same as the shipped kernel's: astra_device.cuh).
#include "astra_abi.h"
#include "astra_device.cuh"  // to_f / from_f, the activations (Act)

template <typename T>
__global__ void silu_and_mul_kernel(const T* __restrict__ in, T* __restrict__ out, int64_t rows, int64_t d,
                                    int64_t in_stride, int64_t out_stride) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* gate = in + r * in_stride;
    const T* up = gate + d;
    T* o = out + r * out_stride;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      o[j] = from_f<T>(Act::apply(to_f(gate[j]), to_f(up[j])));
    }
  }
}

template <typename T>
static int launch(const AstraTensor& in, const AstraTensor& out, cudaStream_t stream) {
  const int64_t rows = out.shape[0], d = out.shape[1];
  const int threads = d >= 1024 ? 1024 : (int)((d + 31) / 32 * 32);  // whole warps, at most one pass for small d
  const int blocks = rows < 65535 ? (int)rows : 65535;
  silu_and_mul_kernel<T><<<blocks, threads, 0, stream>>>(static_cast<const T*>(in.data), static_cast<T*>(out.data),
                                                         rows, d, in.stride[0], out.stride[0]);
  return (int)cudaGetLastError();
}

ASTRA_ENTRY {
  (void)scalars;
  if (num_tensors != 2 || num_scalars != 0) return ASTRA_UNSUPPORTED;
  const AstraTensor& in = tensors[0];
  const AstraTensor& out = tensors[1];
  if (in.ndim != 2 || out.ndim != 2 || in.dtype != out.dtype) return ASTRA_UNSUPPORTED;
  if (in.shape[0] != out.shape[0] || in.shape[1] != 2 * out.shape[1]) return ASTRA_UNSUPPORTED;
  // Columns must be dense (a size-1 dim's stride is meaningless); rows may have any stride.
  if ((in.shape[1] > 1 && in.stride[1] != 1) || (out.shape[1] > 1 && out.stride[1] != 1)) return ASTRA_UNSUPPORTED;
  if (out.shape[0] == 0 || out.shape[1] == 0) return ASTRA_OK;  // nothing to do: launch nothing
  switch (in.dtype) {
    case ASTRA_FLOAT32: return launch<float>(in, out, stream);
    case ASTRA_FLOAT16: return launch<__half>(in, out, stream);
    case ASTRA_BFLOAT16: return launch<__nv_bfloat16>(in, out, stream);
    default: return ASTRA_UNSUPPORTED;
  }
}
