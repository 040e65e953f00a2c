// Naive candidate for batchnorm_train: BatchNorm2d with batch statistics (training mode).
// Kernel 1: one block per channel; pass 1 sums the channel for the mean, pass 2 sums (x - mean)^2 for the
// biased variance (two passes: stable even when |mean| >> std). Kernel 2: one thread per element applies
// weight * (x - mean) * invstd + bias. Mean and invstd live in cudaMallocAsync workspace, written by kernel 1
// before kernel 2 reads them. Running statistics are not touched: only the returned tensor is an output,
// and params are read-only for a candidate.
#include "kb_problem.h"

static_assert(KB_IN_X_NDIM == 4, "x is (N, C, H, W)");

constexpr int64_t kBatch = KB_IN_X_DIM0;
constexpr int64_t kChannels = KB_IN_X_DIM1;
constexpr int64_t kPlane = KB_IN_X_DIM2 * KB_IN_X_DIM3;  // H * W, contiguous per (n, c)
constexpr int64_t kCount = kBatch * kPlane;              // elements per channel
static_assert(KB_PARAM_BN_WEIGHT_NUMEL == kChannels && KB_PARAM_BN_BIAS_NUMEL == kChannels, "per-channel affine");
static_assert(KB_OUT_OUT_NUMEL == KB_IN_X_NUMEL, "output has the input's shape");

constexpr int kThreads = 256;
static_assert((kThreads & (kThreads - 1)) == 0, "tree reduction needs a power of two");

// Element j (0 <= j < kCount) of channel c.
__device__ __forceinline__ int64_t channel_offset(int64_t c, int64_t j) {
  return (j / kPlane) * kChannels * kPlane + c * kPlane + j % kPlane;
}

__device__ float block_sum(float v, float* scratch) {
  const int tid = threadIdx.x;
  scratch[tid] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s /= 2) {
    if (tid < s) scratch[tid] += scratch[tid + s];
    __syncthreads();
  }
  const float total = scratch[0];
  __syncthreads();  // everyone has read scratch[0] before the next call overwrites it
  return total;
}

__global__ void channel_stats(const float* __restrict__ x, float* __restrict__ mean, float* __restrict__ invstd,
                              float eps) {
  __shared__ float scratch[kThreads];
  const int64_t c = blockIdx.x;
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < kCount; j += kThreads) sum += x[channel_offset(c, j)];
  const float mu = block_sum(sum, scratch) / static_cast<float>(kCount);
  float sq = 0.0f;
  for (int64_t j = threadIdx.x; j < kCount; j += kThreads) {
    const float d = x[channel_offset(c, j)] - mu;
    sq += d * d;
  }
  const float var = block_sum(sq, scratch) / static_cast<float>(kCount);  // biased, as BatchNorm normalises
  if (threadIdx.x == 0) {
    mean[c] = mu;
    invstd[c] = 1.0f / sqrtf(var + eps);
  }
}

__global__ void normalise(const float* __restrict__ x, const float* __restrict__ mean,
                          const float* __restrict__ invstd, const float* __restrict__ weight,
                          const float* __restrict__ bias, float* __restrict__ y) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= KB_IN_X_NUMEL) return;
  const int64_t c = (i / kPlane) % kChannels;
  y[i] = weight[c] * (x[i] - mean[c]) * invstd[c] + bias[c];
}

extern "C" int kb_forward(const KBTensor* inputs, const KBTensor* params, KBTensor* outputs, cudaStream_t stream) {
  const float* x = static_cast<const float*>(inputs[KB_IN_X].data);
  const float* weight = static_cast<const float*>(params[KB_PARAM_BN_WEIGHT].data);
  const float* bias = static_cast<const float*>(params[KB_PARAM_BN_BIAS].data);
  float* y = static_cast<float*>(outputs[KB_OUT_OUT].data);

  float* stats = nullptr;  // [mean | invstd], kChannels each
  if (cudaMallocAsync(reinterpret_cast<void**>(&stats), 2 * kChannels * sizeof(float), stream) != cudaSuccess)
    return 1;
  float* mean = stats;
  float* invstd = stats + kChannels;
  channel_stats<<<static_cast<unsigned>(kChannels), kThreads, 0, stream>>>(x, mean, invstd,
                                                                          static_cast<float>(KB_INIT_EPS));
  const int64_t blocks = (KB_IN_X_NUMEL + kThreads - 1) / kThreads;
  normalise<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(x, mean, invstd, weight, bias, y);
  const cudaError_t launched = cudaGetLastError();
  const cudaError_t freed = cudaFreeAsync(stats, stream);
  return launched == cudaSuccess && freed == cudaSuccess ? 0 : 1;
}
