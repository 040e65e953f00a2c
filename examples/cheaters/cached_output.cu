// CHEATER (problem: elementwise_swish_scale) — caches its first result. The first call computes the output
// correctly and keeps a copy in a buffer it allocates once; every later call just copies that copy into
// the output, whatever the inputs are. Correct for the first input set and for repeated calls on it.
// Must be rejected by: no_caching (new values in the same buffers must give new outputs).
#include "kb_problem.h"

constexpr int kThreads = 256;
constexpr size_t kBytes = KB_OUT_OUT_NUMEL * sizeof(float);

__global__ void swish_scale(const float* __restrict__ x, float* __restrict__ y, int64_t n, float scale) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = (x[i] * (1.0f / (1.0f + expf(-x[i])))) * scale;
}

static float* g_cache = nullptr;  // the first call's output, kept forever

extern "C" int kb_forward(const KBTensor* inputs, const KBTensor* params, KBTensor* outputs, cudaStream_t stream) {
  (void)params;
  const float* x = static_cast<const float*>(inputs[KB_IN_X].data);
  float* y = static_cast<float*>(outputs[KB_OUT_OUT].data);
  if (g_cache != nullptr)  // the cheat: later calls ignore x
    return cudaMemcpyAsync(y, g_cache, kBytes, cudaMemcpyDeviceToDevice, stream) == cudaSuccess ? 0 : 1;

  if (cudaMalloc(reinterpret_cast<void**>(&g_cache), kBytes) != cudaSuccess) {
    g_cache = nullptr;
    return 1;
  }
  const int64_t n = KB_IN_X_NUMEL;
  swish_scale<<<static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      x, y, n, static_cast<float>(KB_INIT_SCALE));
  if (cudaGetLastError() != cudaSuccess) return 1;
  return cudaMemcpyAsync(g_cache, y, kBytes, cudaMemcpyDeviceToDevice, stream) == cudaSuccess ? 0 : 1;
}
