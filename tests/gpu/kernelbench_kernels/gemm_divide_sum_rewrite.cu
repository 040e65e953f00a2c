// HONEST (problem: level2/14_Gemm_Divide_Sum_Scaling) — the algebraic rewrite: sum_j (x W^T)[b, j] / 2 * s is
// x[b, :] . colsum(W) * s / 2, so W's column sums (one pass over W) and one dot product per row replace the
// GEMM: about 1/8192 of the reference's FLOPs, below its compute floor, above the memory floor (W is read once).
// Must be accepted (`ok`), after the extra verification a time below the compute floor earns.
#include "kb_problem.h"

constexpr int kBatch = static_cast<int>(KB_IN_X_DIM0);
constexpr int kIn = static_cast<int>(KB_IN_X_DIM1);
constexpr int kHidden = static_cast<int>(KB_PARAM_WEIGHT_DIM0);
static_assert(KB_PARAM_WEIGHT_DIM1 == kIn, "W is [hidden, input]");
static_assert(KB_OUT_OUT_DIM0 == kBatch && KB_OUT_OUT_DIM1 == 1, "out is [batch, 1]");
constexpr float kScale = static_cast<float>(KB_INIT_SCALING_FACTOR) / 2.0f;
constexpr int kThreads = 256;
constexpr int kSplits = 32;  // W's rows are summed in this many slices, then the slices are added
static_assert(kIn % kThreads == 0 && kHidden % kSplits == 0, "sizes divide the tiling");

__device__ float g_partial[kSplits][kIn];
__device__ float g_colsum[kIn];

// Thread k of slice s sums W[n][k] over the slice's rows (coalesced along k).
__global__ void column_partials(const float* __restrict__ w) {
  const int k = blockIdx.x * kThreads + threadIdx.x;
  const int rows = kHidden / kSplits;
  const float* column = w + static_cast<int64_t>(blockIdx.y) * rows * kIn + k;
  float sum = 0.0f;
  for (int n = 0; n < rows; ++n) sum += column[static_cast<int64_t>(n) * kIn];
  g_partial[blockIdx.y][k] = sum;
}

__global__ void column_sums() {
  const int k = blockIdx.x * kThreads + threadIdx.x;
  float sum = 0.0f;
  for (int s = 0; s < kSplits; ++s) sum += g_partial[s][k];
  g_colsum[k] = sum;
}

// One block per row: out[b] = scale/2 * sum_k x[b][k] * colsum[k].
__global__ void row_dots(const float* __restrict__ x, float* __restrict__ out) {
  __shared__ float warp_sums[kThreads / 32];
  const float* row = x + static_cast<int64_t>(blockIdx.x) * kIn;
  float sum = 0.0f;
  for (int k = threadIdx.x; k < kIn; k += kThreads) sum = fmaf(row[k], g_colsum[k], sum);
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.0f;
    for (int i = 0; i < kThreads / 32; ++i) total += warp_sums[i];
    out[blockIdx.x] = total * kScale;
  }
}

extern "C" int kb_forward(const KBTensor* inputs, const KBTensor* params, KBTensor* outputs, cudaStream_t stream) {
  const float* x = static_cast<const float*>(inputs[KB_IN_X].data);
  const float* w = static_cast<const float*>(params[KB_PARAM_WEIGHT].data);
  float* out = static_cast<float*>(outputs[KB_OUT_OUT].data);
  column_partials<<<dim3(kIn / kThreads, kSplits), kThreads, 0, stream>>>(w);
  column_sums<<<kIn / kThreads, kThreads, 0, stream>>>();
  row_dots<<<kBatch, kThreads, 0, stream>>>(x, out);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
