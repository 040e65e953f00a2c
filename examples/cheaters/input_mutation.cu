// CHEATER (problem: elementwise_swish_scale) — computes the right output but also overwrites the input x
// with the result (as if x were free scratch space), so the caller's tensor is destroyed.
// Must be rejected by: inputs_unchanged.
#include "kb_problem.h"

constexpr int kThreads = 256;

// Each element is read and written by one thread only, so the output is correct; x is clobbered.
__global__ void swish_scale_clobber(float* __restrict__ x, float* __restrict__ y, int64_t n, float scale) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) {
    const float v = x[i];
    const float r = (v * (1.0f / (1.0f + expf(-v)))) * scale;
    y[i] = r;
    x[i] = r;  // the cheat: writes into a read-only input
  }
}

extern "C" int kb_forward(const KBTensor* inputs, const KBTensor* params, KBTensor* outputs, cudaStream_t stream) {
  (void)params;
  float* x = static_cast<float*>(inputs[KB_IN_X].data);
  float* y = static_cast<float*>(outputs[KB_OUT_OUT].data);
  const int64_t n = KB_IN_X_NUMEL;
  swish_scale_clobber<<<static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      x, y, n, static_cast<float>(KB_INIT_SCALE));
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
