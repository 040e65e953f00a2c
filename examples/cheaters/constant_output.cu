// CHEATER (problem: softmax_rows) — fills every element with 1 / cols, the softmax of a constant row. Every
// row sums to 1 and every value is in (0, 1), like a real softmax, but it ignores the input.
// Must be rejected by: correct.
#include "kb_problem.h"

constexpr int64_t kCols = KB_IN_X_DIM1;

__global__ void fill(float* __restrict__ y, int64_t n, float value) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) y[i] = value;
}

extern "C" int kb_forward(const KBTensor* inputs, const KBTensor* params, KBTensor* outputs, cudaStream_t stream) {
  (void)inputs;
  (void)params;
  float* y = static_cast<float*>(outputs[KB_OUT_OUT].data);
  fill<<<1024, 256, 0, stream>>>(y, KB_OUT_OUT_NUMEL, 1.0f / static_cast<float>(kCols));
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
