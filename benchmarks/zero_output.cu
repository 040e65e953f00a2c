// The candidate benchmarks/kernelbench_memory.py evaluates on every problem: it writes zeros to every output
// (sizes from the tensors it is given), so on a problem whose reference is not zero it must be `incorrect`.
#include "kb_problem.h"

extern "C" int kb_forward(const KBTensor* inputs, const KBTensor* params, KBTensor* outputs, cudaStream_t stream) {
  (void)inputs;
  (void)params;
  for (int o = 0; o < KB_NUM_OUTPUTS; ++o) {
    size_t bytes = kb_dtype_size(outputs[o].dtype);
    for (int d = 0; d < outputs[o].ndim; ++d) bytes *= static_cast<size_t>(outputs[o].shape[d]);
    if (cudaMemsetAsync(outputs[o].data, 0, bytes, stream) != cudaSuccess) return 1;
  }
  return 0;
}
