// Unusual but correct (problem: softmax_rows). Takes workspace for the per-row max and sum from
// cudaMallocAsync on `stream` every call and returns it with cudaFreeAsync on `stream`. Kernel 1 (one block
// per row) writes every row's max and sum into the workspace; kernel 2 (elementwise over the whole matrix)
// reads them. The workspace is fully written before it is read, so the harness's 0xFF poisoning of new
// allocations never shows.
#include "kb_problem.h"

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

// One block per row: row_max[r] and row_sum[r] = sum exp(x - row_max[r]).
__global__ void __launch_bounds__(kThreads) row_stats(const float* __restrict__ x, float* __restrict__ row_max,
                                                      float* __restrict__ row_sum) {
  __shared__ float max_partial[kWarps];
  __shared__ float sum_partial[kWarps];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * kCols;

  float m = -INFINITY;
  for (int64_t c = tid; c < kCols; c += kThreads) m = fmaxf(m, xr[c]);
  m = warp_max(m);
  if (lane == 0) max_partial[warp] = m;
  __syncthreads();
  float mx = max_partial[0];
  for (int w = 1; w < kWarps; ++w) mx = fmaxf(mx, max_partial[w]);

  float s = 0.0f;
  for (int64_t c = tid; c < kCols; c += kThreads) s += expf(xr[c] - mx);  // NaN/inf rows -> NaN sum
  s = warp_sum(s);
  if (lane == 0) sum_partial[warp] = s;
  __syncthreads();
  if (tid == 0) {
    float total = sum_partial[0];
    for (int w = 1; w < kWarps; ++w) total += sum_partial[w];
    row_max[blockIdx.x] = mx;
    row_sum[blockIdx.x] = total;
  }
}

__global__ void normalise(const float* __restrict__ x, const float* __restrict__ row_max,
                          const float* __restrict__ row_sum, float* __restrict__ y) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < kRows * kCols; i += stride) {
    const int64_t r = i / kCols;
    y[i] = expf(x[i] - row_max[r]) / row_sum[r];
  }
}

extern "C" int kb_forward(const KBTensor* inputs, const KBTensor* params, KBTensor* outputs, cudaStream_t stream) {
  (void)params;
  const float* x = static_cast<const float*>(inputs[KB_IN_X].data);
  float* y = static_cast<float*>(outputs[KB_OUT_OUT].data);

  float* ws = nullptr;  // [row_max | row_sum]
  if (cudaMallocAsync(reinterpret_cast<void**>(&ws), 2 * kRows * sizeof(float), stream) != cudaSuccess) return 1;
  row_stats<<<static_cast<unsigned>(kRows), kThreads, 0, stream>>>(x, ws, ws + kRows);
  normalise<<<4096, kThreads, 0, stream>>>(x, ws, ws + kRows, y);
  const cudaError_t launched = cudaGetLastError();
  const cudaError_t freed = cudaFreeAsync(ws, stream);
  return launched == cudaSuccess && freed == cudaSuccess ? 0 : 1;
}
