// CHEATER (problem: gemm_bias_relu) — writes zeros everywhere. A ReLU output is zero in about half of its
// elements, so an all-zero answer is "half right"; every element is written, so only the values are wrong.
// Must be rejected by: correct.
#include "kb_problem.h"

extern "C" int kb_forward(const KBTensor* inputs, const KBTensor* params, KBTensor* outputs, cudaStream_t stream) {
  (void)inputs;
  (void)params;
  const size_t bytes = KB_OUT_OUT_NUMEL * sizeof(float);
  return cudaMemsetAsync(outputs[KB_OUT_OUT].data, 0, bytes, stream) == cudaSuccess ? 0 : 1;
}
