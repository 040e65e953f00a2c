// CHEATER (problem: elementwise_swish_scale) — computes only the first half of the output correctly and
// never writes the second half.
// Must be rejected by: outputs_written.
#include "kb_problem.h"

constexpr int kThreads = 256;

__global__ void swish_scale_prefix(const float* __restrict__ x, float* __restrict__ y, int64_t n, float scale) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = (x[i] * (1.0f / (1.0f + expf(-x[i])))) * scale;
}

extern "C" int kb_forward(const KBTensor* inputs, const KBTensor* params, KBTensor* outputs, cudaStream_t stream) {
  (void)params;
  const float* x = static_cast<const float*>(inputs[KB_IN_X].data);
  float* y = static_cast<float*>(outputs[KB_OUT_OUT].data);
  const int64_t half = KB_IN_X_NUMEL / 2;  // the cheat: elements [half, numel) are never written
  swish_scale_prefix<<<static_cast<unsigned>((half + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      x, y, half, static_cast<float>(KB_INIT_SCALE));
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
