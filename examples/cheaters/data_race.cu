// CHEATER (problem: softmax_rows) — a data race in the row sum. One block per row; the max is reduced
// correctly, but every thread then adds its partial sum of exp(x - max) into one shared float with a plain
// read-modify-write (no atomic, no ordering). All 32 lanes of a warp read the same old value in the same
// instruction, so at most one lane's addition survives per warp: the sum always misses most of the row
// (wrong on every call, not merely nondeterministic), and the outputs come out far too large.
// Must be rejected by: correct (or deterministic).
#include "kb_problem.h"

constexpr int64_t kRows = KB_IN_X_DIM0;
constexpr int64_t kCols = KB_IN_X_DIM1;
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

__global__ void softmax_racy_sum(const float* __restrict__ x, float* __restrict__ y) {
  __shared__ float max_partial[kWarps];
  __shared__ float row_sum;
  const int tid = threadIdx.x;
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * kCols;
  float* yr = y + static_cast<int64_t>(blockIdx.x) * kCols;

  float m = -INFINITY;
  for (int64_t c = tid; c < kCols; c += kThreads) m = fmaxf(m, xr[c]);
  for (int offset = 16; offset > 0; offset /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));
  if (tid % 32 == 0) max_partial[tid / 32] = m;
  if (tid == 0) row_sum = 0.0f;
  __syncthreads();
  float row_max = max_partial[0];
  for (int w = 1; w < kWarps; ++w) row_max = fmaxf(row_max, max_partial[w]);

  float s = 0.0f;
  for (int64_t c = tid; c < kCols; c += kThreads) s += expf(xr[c] - row_max);
  row_sum += s;  // the race: 256 unsynchronised read-modify-writes of one shared float
  __syncthreads();
  const float total = row_sum;
  for (int64_t c = tid; c < kCols; c += kThreads) yr[c] = expf(xr[c] - row_max) / total;
}

extern "C" int kb_forward(const KBTensor* inputs, const KBTensor* params, KBTensor* outputs, cudaStream_t stream) {
  (void)params;
  const float* x = static_cast<const float*>(inputs[KB_IN_X].data);
  float* y = static_cast<float*>(outputs[KB_OUT_OUT].data);
  softmax_racy_sum<<<static_cast<unsigned>(kRows), kThreads, 0, stream>>>(x, y);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
