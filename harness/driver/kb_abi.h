// KernelBlaster candidate ABI: the contract between a CUDA candidate and the test driver.
//
// A candidate is one CUDA C++ source that includes "kb_problem.h" (generated per problem; it includes
// this file) and defines kb_forward. Tensors arrive in a fixed order: inputs in get_inputs() order
// (tensors only), params in state_dict() order, outputs in return order. The harness owns every buffer;
// the candidate may allocate workspace of its own. kb_forward launches all its work on `stream` (or joins
// any other stream it uses back to `stream` before returning) and returns 0 on success.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime.h>

typedef struct {
  void* data;
  int32_t dtype;
  int32_t ndim;
  int64_t shape[8];
  int64_t strides[8];  // in elements, as torch reports them
} KBTensor;

enum KBDtype {
  KB_FLOAT32 = 0,
  KB_FLOAT16 = 1,
  KB_BFLOAT16 = 2,
  KB_FLOAT64 = 3,
  KB_INT8 = 4,
  KB_UINT8 = 5,
  KB_INT16 = 6,
  KB_INT32 = 7,
  KB_INT64 = 8,
  KB_BOOL = 9,
};

// Bytes per element of a KBDtype.
static inline size_t kb_dtype_size(int32_t dtype) {
  switch (dtype) {
    case KB_FLOAT64:
    case KB_INT64:
      return 8;
    case KB_FLOAT32:
    case KB_INT32:
      return 4;
    case KB_FLOAT16:
    case KB_BFLOAT16:
    case KB_INT16:
      return 2;
    default:
      return 1;
  }
}

extern "C" int kb_forward(const KBTensor* inputs, const KBTensor* params, KBTensor* outputs,
                          cudaStream_t stream);
