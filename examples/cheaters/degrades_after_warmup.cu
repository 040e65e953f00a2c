// CHEATER (problem: elementwise_swish_scale) — correct for its first 24 calls (more than verification
// makes: 15 with the default 5 seeds under strict), then writes only the first half of the output, twice as
// fast. Verification sees a correct kernel; the timed calls are the cheap ones.
// Must be rejected by: timed_outputs (batches of timed calls, chosen after they ran, are checked in full).
#include "kb_problem.h"

constexpr int kThreads = 256;
constexpr int kHonestCalls = 24;

__global__ void swish_scale(const float* __restrict__ x, float* __restrict__ y, int64_t n, float scale) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = (x[i] * (1.0f / (1.0f + expf(-x[i])))) * scale;
}

extern "C" int kb_forward(const KBTensor* inputs, const KBTensor* params, KBTensor* outputs, cudaStream_t stream) {
  (void)params;
  static int calls = 0;
  const float* x = static_cast<const float*>(inputs[KB_IN_X].data);
  float* y = static_cast<float*>(outputs[KB_OUT_OUT].data);
  const int64_t n = ++calls <= kHonestCalls ? KB_IN_X_NUMEL : KB_IN_X_NUMEL / 2;  // the cheat, from call 25
  swish_scale<<<static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      x, y, n, static_cast<float>(KB_INIT_SCALE));
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
