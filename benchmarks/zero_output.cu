// The candidate benchmarks/kernelbench_memory.py evaluates on every problem: it writes zeros to every output
// (sizes from the tensors it is given), so on a problem whose reference is not zero it must be `incorrect`.
#include "kb_problem.h"

static size_t element_bytes(int32_t dtype) {
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

extern "C" int kb_forward(const KBTensor* inputs, const KBTensor* params, KBTensor* outputs, cudaStream_t stream) {
  (void)inputs;
  (void)params;
  for (int o = 0; o < KB_NUM_OUTPUTS; ++o) {
    size_t bytes = element_bytes(outputs[o].dtype);
    for (int d = 0; d < outputs[o].ndim; ++d) bytes *= static_cast<size_t>(outputs[o].shape[d]);
    if (cudaMemsetAsync(outputs[o].data, 0, bytes, stream) != cudaSuccess) return 1;
  }
  return 0;
}
