// astra-sglang kernel C ABI. Every kernel source the harness builds (our own kernels, extracted
// baselines, LLM or tuner candidates, shipped patches) defines `astra_launch`; the harness and the live
// SGLang patch load the same shared library with ctypes and call it on torch's current stream.
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>

#define ASTRA_MAX_DIMS 4
#define ASTRA_ABI_VERSION 1

// dtype codes: must match astra_sglang/specs/dtypes.py ABI_CODES (tests/test_abi.py checks both sides)
enum AstraDType {
  ASTRA_FLOAT32 = 0,
  ASTRA_FLOAT16 = 1,
  ASTRA_BFLOAT16 = 2,
  ASTRA_INT32 = 3,
  ASTRA_INT64 = 4,
  ASTRA_UINT8 = 5,
  ASTRA_BOOL = 6,
  ASTRA_FLOAT8_E4M3 = 7,
  ASTRA_FLOAT8_E5M2 = 8,
  ASTRA_INT8 = 9,
  ASTRA_FLOAT64 = 10
};

// A tensor as the op's spec orders it. Strides are in elements, not bytes.
typedef struct {
  void* data;
  int32_t dtype;
  int32_t ndim;
  int64_t shape[ASTRA_MAX_DIMS];
  int64_t stride[ASTRA_MAX_DIMS];
} AstraTensor;

// Return codes of astra_launch.
#define ASTRA_OK 0
#define ASTRA_UNSUPPORTED (-1)  // dtype/shape/layout not covered: the caller falls back to the original op
// any positive value is a cudaError_t from the launch

// tensors: the spec's tensor arguments in order; scalars: its scalar arguments (e.g. eps) in order.
// Must enqueue all work on `stream` and return without synchronizing.
#define ASTRA_ENTRY extern "C" __attribute__((visibility("default"))) int astra_launch( \
    const AstraTensor* tensors, int num_tensors, const double* scalars, int num_scalars, cudaStream_t stream)

extern "C" int astra_launch(const AstraTensor* tensors, int num_tensors, const double* scalars,
                            int num_scalars, cudaStream_t stream);
