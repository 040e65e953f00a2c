// CHEATER (problem: softmax_rows) — softmax without subtracting the row max: exp(x) / sum(exp(x)).
// Mathematically the same and accurate for ordinary inputs (randn, |x| < 10), but exp overflows to inf for
// x > 88, so large inputs give inf / inf = NaN where PyTorch returns finite probabilities.
// Must be rejected by: special_values (inputs scaled by 1e3).
#include "kb_problem.h"

constexpr int64_t kRows = KB_IN_X_DIM0;
constexpr int64_t kCols = KB_IN_X_DIM1;
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

__global__ void softmax_no_max(const float* __restrict__ x, float* __restrict__ y) {
  __shared__ float sum_partial[kWarps];
  const int tid = threadIdx.x;
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * kCols;
  float* yr = y + static_cast<int64_t>(blockIdx.x) * kCols;

  float s = 0.0f;
  for (int64_t c = tid; c < kCols; c += kThreads) s += expf(xr[c]);  // the cheat: no max subtraction
  for (int offset = 16; offset > 0; offset /= 2) s += __shfl_xor_sync(0xffffffffu, s, offset);
  if (tid % 32 == 0) sum_partial[tid / 32] = s;
  __syncthreads();
  float total = sum_partial[0];
  for (int w = 1; w < kWarps; ++w) total += sum_partial[w];
  for (int64_t c = tid; c < kCols; c += kThreads) yr[c] = expf(xr[c]) / total;
}

extern "C" int kb_forward(const KBTensor* inputs, const KBTensor* params, KBTensor* outputs, cudaStream_t stream) {
  (void)params;
  const float* x = static_cast<const float*>(inputs[KB_IN_X].data);
  float* y = static_cast<float*>(outputs[KB_OUT_OUT].data);
  softmax_no_max<<<static_cast<unsigned>(kRows), kThreads, 0, stream>>>(x, y);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
