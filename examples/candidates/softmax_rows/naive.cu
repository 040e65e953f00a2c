// Naive candidate for softmax_rows: softmax over dim=1 of a (rows, cols) tensor.
// One block per row, three passes over the row in global memory (max, sum of exp, normalise), each
// reduced with a textbook shared-memory tree. Subtracting the row max keeps exp() from overflowing;
// a NaN or an infinity in a row makes the whole row NaN, as in PyTorch (see the sum pass).
#include "kb_problem.h"

static_assert(KB_IN_X_NDIM == 2, "softmax over dim=1 of a 2-D tensor");

constexpr int64_t kRows = KB_IN_X_DIM0;
constexpr int64_t kCols = KB_IN_X_DIM1;
constexpr int kThreads = 256;  // a power of two, for the tree reduction
static_assert((kThreads & (kThreads - 1)) == 0, "tree reduction needs a power of two");

__global__ void softmax_rows_naive(const float* __restrict__ x, float* __restrict__ y) {
  __shared__ float scratch[kThreads];
  const int tid = threadIdx.x;
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * kCols;
  float* yr = y + static_cast<int64_t>(blockIdx.x) * kCols;

  // Pass 1: row max.
  float m = -INFINITY;
  for (int64_t c = tid; c < kCols; c += kThreads) m = fmaxf(m, xr[c]);
  scratch[tid] = m;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s /= 2) {
    if (tid < s) scratch[tid] = fmaxf(scratch[tid], scratch[tid + s]);
    __syncthreads();
  }
  const float row_max = scratch[0];
  __syncthreads();  // everyone has read scratch[0] before it is reused below

  // Pass 2: sum of exp(x - max). fmaxf above skips NaN, but exp(NaN - max) is NaN, and a +-inf max gives
  // exp(inf - inf) = NaN, so such rows get a NaN sum and come out all NaN, matching PyTorch.
  float sum = 0.0f;
  for (int64_t c = tid; c < kCols; c += kThreads) sum += expf(xr[c] - row_max);
  scratch[tid] = sum;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s /= 2) {
    if (tid < s) scratch[tid] += scratch[tid + s];
    __syncthreads();
  }
  const float row_sum = scratch[0];

  // Pass 3: normalise.
  for (int64_t c = tid; c < kCols; c += kThreads) yr[c] = expf(xr[c] - row_max) / row_sum;
}

extern "C" int kb_forward(const KBTensor* inputs, const KBTensor* params, KBTensor* outputs, cudaStream_t stream) {
  (void)params;
  const float* x = static_cast<const float*>(inputs[KB_IN_X].data);
  float* y = static_cast<float*>(outputs[KB_OUT_OUT].data);
  softmax_rows_naive<<<static_cast<unsigned>(kRows), kThreads, 0, stream>>>(x, y);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
