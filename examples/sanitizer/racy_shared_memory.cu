// SANITIZER CASE (problem: softmax_rows) — correct softmax, one block per row, whose warps exchange their
// partial max and sum through shared memory behind a hand-made barrier instead of __syncthreads(): each
// warp's leader stores its partial, fences, and bumps a shared arrival counter, and every thread spins
// until all warps have arrived. The fences order each store before its arrival, so on the GPU the answer
// is right every time and every verification check passes; but the exchange is outside what racecheck can
// prove (it knows only barriers), and it reports the partials' stores and loads as a race.
// Must be: ok without --sanitize; sanitizer_error under --sanitize racecheck.
#include "kb_problem.h"

#include <cstdint>

static_assert(KB_IN_X_NDIM == 2, "softmax over dim=1 of a 2-D tensor");

constexpr int64_t kRows = KB_IN_X_DIM0;
constexpr int64_t kCols = KB_IN_X_DIM1;
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

__device__ __forceinline__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Publishes this warp's partial and waits until every warp has published its own.
__device__ __forceinline__ void publish_and_wait(float mine, float* partial, int* arrived) {
  if (threadIdx.x % 32 == 0) {
    partial[threadIdx.x / 32] = mine;
    __threadfence_block();
    atomicAdd(arrived, 1);
  }
  while (atomicAdd(arrived, 0) < kWarps) __nanosleep(64);  // fewer polls for the sanitizer to follow
  __threadfence_block();
}

__global__ void __launch_bounds__(kThreads) softmax_hand_made_barrier(const float* __restrict__ x,
                                                                     float* __restrict__ y) {
  __shared__ float max_partial[kWarps];
  __shared__ float sum_partial[kWarps];
  __shared__ int max_arrived;
  __shared__ int sum_arrived;
  const int tid = threadIdx.x;
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * kCols;
  float* yr = y + static_cast<int64_t>(blockIdx.x) * kCols;
  if (tid == 0) max_arrived = sum_arrived = 0;
  __syncthreads();

  float m = -INFINITY;
  for (int64_t c = tid; c < kCols; c += kThreads) m = fmaxf(m, xr[c]);
  publish_and_wait(warp_max(m), max_partial, &max_arrived);
  float row_max = max_partial[0];
  for (int w = 1; w < kWarps; ++w) row_max = fmaxf(row_max, max_partial[w]);

  // exp(NaN - max) is NaN, so a row holding NaN or +inf ends all NaN, as PyTorch's does.
  float s = 0.0f;
  for (int64_t c = tid; c < kCols; c += kThreads) s += expf(xr[c] - row_max);
  publish_and_wait(warp_sum(s), sum_partial, &sum_arrived);
  float row_sum = sum_partial[0];
  for (int w = 1; w < kWarps; ++w) row_sum += sum_partial[w];

  for (int64_t c = tid; c < kCols; c += kThreads) yr[c] = expf(xr[c] - row_max) / row_sum;
}

extern "C" int kb_forward(const KBTensor* inputs, const KBTensor* params, KBTensor* outputs, cudaStream_t stream) {
  (void)params;
  const float* x = static_cast<const float*>(inputs[KB_IN_X].data);
  float* y = static_cast<float*>(outputs[KB_OUT_OUT].data);
  softmax_hand_made_barrier<<<static_cast<unsigned>(kRows), kThreads, 0, stream>>>(x, y);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
