// Fast candidate for batchnorm_train: BatchNorm2d with batch statistics (training mode).
// Why it is faster than the naive one: the statistics are spread over N x C blocks instead of C, so every
// SM streams memory. Kernel 1: block (n, c) holds the contiguous H*W plane x[n, c] in registers (float4
// loads, one DRAM read), and computes the plane's mean and M2 = sum (x - plane mean)^2 exactly (two passes
// over registers). Kernel 2: one thread per channel merges the N equal-count partials exactly:
// mean = average of plane means, M2 = sum M2_n + plane * sum (mean_n - mean)^2 (no E[x^2] - E[x]^2
// cancellation). Kernel 3: block (n, c) normalises its plane with float4s:
// weight * (x - mean) * invstd + bias (PyTorch's order). NaN/Inf in a channel make its mean or M2 NaN or
// inf - inf = NaN, so the whole channel is NaN, as in PyTorch. Workspace from cudaMallocAsync, fully
// written before it is read. Running statistics are not touched (params are read-only).
#include "kb_problem.h"

#include <cstdint>

static_assert(KB_IN_X_NDIM == 4, "x is (N, C, H, W)");

constexpr int kBatch = static_cast<int>(KB_IN_X_DIM0);
constexpr int kChannels = static_cast<int>(KB_IN_X_DIM1);
constexpr int kPlane = static_cast<int>(KB_IN_X_DIM2 * KB_IN_X_DIM3);  // H * W, contiguous per (n, c)
static_assert(KB_IN_X_DIM2 * KB_IN_X_DIM3 < (int64_t{1} << 30), "plane index fits in int");
static_assert(KB_PARAM_BN_WEIGHT_NUMEL == kChannels && KB_PARAM_BN_BIAS_NUMEL == kChannels, "per-channel affine");
static_assert(KB_OUT_OUT_NUMEL == KB_IN_X_NUMEL, "output has the input's shape");

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kVecsPerThread = ((kPlane + 3) / 4 + kThreads - 1) / kThreads;  // float4 slots per thread
constexpr int kPerThread = 4 * kVecsPerThread;
static_assert(kPerThread * kThreads >= kPlane, "every plane element has a register slot");
static_assert(kPerThread <= 64, "plane too large to keep in registers");

// Plane element held in register slot i of thread tid (same layout as the fast softmax).
template <bool kVec>
__device__ __forceinline__ int element(int i, int tid) {
  if constexpr (kVec)
    return ((i / 4) * kThreads + tid) * 4 + i % 4;
  else
    return i * kThreads + tid;
}

template <bool kVec>
__device__ __forceinline__ void load_plane(const float* __restrict__ p, float (&v)[kPerThread]) {
  const int tid = threadIdx.x;
  if constexpr (kVec) {
#pragma unroll
    for (int j = 0; j < kVecsPerThread; ++j) {
      const int e = element<true>(4 * j, tid);
      const float4 f = e < kPlane ? __ldg(reinterpret_cast<const float4*>(p + e)) : make_float4(0.f, 0.f, 0.f, 0.f);
      v[4 * j] = f.x;
      v[4 * j + 1] = f.y;
      v[4 * j + 2] = f.z;
      v[4 * j + 3] = f.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int e = element<false>(i, tid);
      v[i] = e < kPlane ? __ldg(p + e) : 0.0f;
    }
  }
}

// Block-wide sum through warp shuffles; `partial` must not be reused by the caller for anything else.
__device__ __forceinline__ float block_sum(float v, float (&partial)[kWarps]) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  float r = partial[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) r += partial[w];
  return r;
}

// grid (kBatch, kChannels): partial statistics of plane (n, c), stored at [c * kBatch + n].
template <bool kVec>
__global__ void __launch_bounds__(kThreads) plane_stats(const float* __restrict__ x, float* __restrict__ plane_mean,
                                                        float* __restrict__ plane_m2) {
  __shared__ float sum_partial[kWarps];
  __shared__ float sq_partial[kWarps];
  const int n = blockIdx.x, c = blockIdx.y, tid = threadIdx.x;
  const float* p = x + (static_cast<int64_t>(n) * kChannels + c) * kPlane;
  float v[kPerThread];
  load_plane<kVec>(p, v);

  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < kPerThread; ++i)
    if (element<kVec>(i, tid) < kPlane) s += v[i];
  const float mu = block_sum(s, sum_partial) / static_cast<float>(kPlane);

  float sq = 0.0f;
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    if (element<kVec>(i, tid) < kPlane) {
      const float d = v[i] - mu;
      sq += d * d;
    }
  }
  const float m2 = block_sum(sq, sq_partial);
  if (tid == 0) {
    plane_mean[c * kBatch + n] = mu;
    plane_m2[c * kBatch + n] = m2;
  }
}

// One thread per channel: merge kBatch equal-count partials into mean and invstd.
__global__ void merge_stats(const float* __restrict__ plane_mean, const float* __restrict__ plane_m2,
                            float* __restrict__ mean, float* __restrict__ invstd, float eps) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= kChannels) return;
  const float* pm = plane_mean + c * kBatch;
  const float* pq = plane_m2 + c * kBatch;
  float mu = 0.0f;
  for (int n = 0; n < kBatch; ++n) mu += pm[n];
  mu /= static_cast<float>(kBatch);
  float m2 = 0.0f, spread = 0.0f;
  for (int n = 0; n < kBatch; ++n) {
    const float d = pm[n] - mu;
    m2 += pq[n];
    spread += d * d;
  }
  m2 += spread * static_cast<float>(kPlane);
  const float var = m2 / (static_cast<float>(kBatch) * static_cast<float>(kPlane));  // biased
  mean[c] = mu;
  invstd[c] = 1.0f / sqrtf(var + eps);
}

// grid (kBatch, kChannels): normalise plane (n, c).
template <bool kVec>
__global__ void __launch_bounds__(kThreads) normalise(const float* __restrict__ x, const float* __restrict__ mean,
                                                      const float* __restrict__ invstd,
                                                      const float* __restrict__ weight,
                                                      const float* __restrict__ bias, float* __restrict__ y) {
  const int n = blockIdx.x, c = blockIdx.y;
  const int64_t base = (static_cast<int64_t>(n) * kChannels + c) * kPlane;
  const float* p = x + base;
  float* q = y + base;
  const float mu = mean[c], is = invstd[c], g = weight[c], b = bias[c];
  if constexpr (kVec) {
    for (int e = threadIdx.x * 4; e < kPlane; e += kThreads * 4) {
      const float4 f = __ldg(reinterpret_cast<const float4*>(p + e));
      *reinterpret_cast<float4*>(q + e) = make_float4(g * (f.x - mu) * is + b, g * (f.y - mu) * is + b,
                                                      g * (f.z - mu) * is + b, g * (f.w - mu) * is + b);
    }
  } else {
    for (int e = threadIdx.x; e < kPlane; e += kThreads) q[e] = g * (__ldg(p + e) - mu) * is + b;
  }
}

static bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

extern "C" int kb_forward(const KBTensor* inputs, const KBTensor* params, KBTensor* outputs, cudaStream_t stream) {
  const float* x = static_cast<const float*>(inputs[KB_IN_X].data);
  const float* weight = static_cast<const float*>(params[KB_PARAM_BN_WEIGHT].data);
  const float* bias = static_cast<const float*>(params[KB_PARAM_BN_BIAS].data);
  float* y = static_cast<float*>(outputs[KB_OUT_OUT].data);

  // Workspace: plane means and M2s (kChannels x kBatch each), then channel mean and invstd (kChannels each).
  constexpr size_t kPartials = static_cast<size_t>(kChannels) * kBatch;
  float* ws = nullptr;
  if (cudaMallocAsync(reinterpret_cast<void**>(&ws), (2 * kPartials + 2 * kChannels) * sizeof(float), stream) !=
      cudaSuccess)
    return 1;
  float* plane_mean = ws;
  float* plane_m2 = ws + kPartials;
  float* mean = ws + 2 * kPartials;
  float* invstd = mean + kChannels;

  // Every plane starts 16-byte aligned when the base is and H*W is a multiple of 4.
  const bool vec = kPlane % 4 == 0 && aligned16(x) && aligned16(y);
  const dim3 planes(kBatch, kChannels);
  if (vec)
    plane_stats<true><<<planes, kThreads, 0, stream>>>(x, plane_mean, plane_m2);
  else
    plane_stats<false><<<planes, kThreads, 0, stream>>>(x, plane_mean, plane_m2);
  merge_stats<<<(kChannels + 63) / 64, 64, 0, stream>>>(plane_mean, plane_m2, mean, invstd,
                                                        static_cast<float>(KB_INIT_EPS));
  if (vec)
    normalise<true><<<planes, kThreads, 0, stream>>>(x, mean, invstd, weight, bias, y);
  else
    normalise<false><<<planes, kThreads, 0, stream>>>(x, mean, invstd, weight, bias, y);
  const cudaError_t launched = cudaGetLastError();
  const cudaError_t freed = cudaFreeAsync(ws, stream);
  return launched == cudaSuccess && freed == cudaSuccess ? 0 : 1;
}
