// HOSTILE: drops NaN and infinities (writes 0) everywhere except the three flat places where the harness used to
// put them (0, n/2, n-1), where it propagates them as PyTorch does. Special values now sit at many random
// places: the verdict is incorrect, failing `special_values`.
#include "kb_problem.h"

__global__ void swish_dropping_specials(const float* x, float* y, int64_t n, float scale) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float v = (x[i] * (1.0f / (1.0f + expf(-x[i])))) * scale;
  const bool watched = i == 0 || i == n / 2 || i == n - 1;
  y[i] = watched || isfinite(v) ? v : 0.0f;
}

extern "C" int kb_forward(const KBTensor* inputs, const KBTensor*, KBTensor* outputs, cudaStream_t stream) {
  const int64_t n = KB_IN_X_NUMEL;
  swish_dropping_specials<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(
      static_cast<const float*>(inputs[KB_IN_X].data), static_cast<float*>(outputs[KB_OUT_OUT].data), n,
      static_cast<float>(KB_INIT_SCALE));
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
