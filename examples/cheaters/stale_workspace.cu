// CHEATER (problem: elementwise_swish_scale) — reads a previous call's results from "fresh" workspace.
// Every call takes workspace with cudaMallocAsync and returns it with cudaFreeAsync. The first call computes
// the output and copies it into the workspace; later calls skip the computation and copy whatever the new
// allocation holds into the output, relying on the pool handing back the same memory with the old bytes
// still in it (the pool is told to keep freed memory, so without the harness's poisoning of new
// allocations this would return the first result every time).
// Must be rejected by: deterministic (the repeat call returns the poison, NaN) or, without poisoning,
// no_caching (the output never changes).
#include "kb_problem.h"

#include <cstdint>

constexpr int kThreads = 256;
constexpr size_t kBytes = KB_OUT_OUT_NUMEL * sizeof(float);

__global__ void swish_scale(const float* __restrict__ x, float* __restrict__ y, int64_t n, float scale) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = (x[i] * (1.0f / (1.0f + expf(-x[i])))) * scale;
}

static bool g_computed_once = false;

// Keep freed blocks in the stream-ordered pool instead of releasing them at synchronisation points.
static bool keep_pool_memory() {
  int device = 0;
  cudaMemPool_t pool;
  if (cudaGetDevice(&device) != cudaSuccess || cudaDeviceGetMemPool(&pool, device) != cudaSuccess) return false;
  uint64_t keep_everything = UINT64_MAX;
  return cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_everything) == cudaSuccess;
}

extern "C" int kb_forward(const KBTensor* inputs, const KBTensor* params, KBTensor* outputs, cudaStream_t stream) {
  (void)params;
  const float* x = static_cast<const float*>(inputs[KB_IN_X].data);
  float* y = static_cast<float*>(outputs[KB_OUT_OUT].data);
  if (!g_computed_once && !keep_pool_memory()) return 1;

  void* ws = nullptr;
  if (cudaMallocAsync(&ws, kBytes, stream) != cudaSuccess) return 1;
  if (!g_computed_once) {
    const int64_t n = KB_IN_X_NUMEL;
    swish_scale<<<static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
        x, y, n, static_cast<float>(KB_INIT_SCALE));
    if (cudaGetLastError() != cudaSuccess) return 1;
    if (cudaMemcpyAsync(ws, y, kBytes, cudaMemcpyDeviceToDevice, stream) != cudaSuccess) return 1;
    g_computed_once = true;
  } else if (cudaMemcpyAsync(y, ws, kBytes, cudaMemcpyDeviceToDevice, stream) != cudaSuccess) {
    return 1;  // the cheat, above: reads workspace this call never wrote
  }
  return cudaFreeAsync(ws, stream) == cudaSuccess ? 0 : 1;
}
