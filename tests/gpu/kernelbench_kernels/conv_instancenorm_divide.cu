// HONEST (problem: level2/17_Conv2d_InstanceNorm_Divide) — a direct fp32 convolution (16x16 output pixels by 16
// output channels a block, input and weight tiles in shared memory), then InstanceNorm in two passes (mean, then
// variance about it) and the division. Its rounding differs from cuDNN's; at inputs scaled by 1e-4 the conv bias
// dominates and InstanceNorm amplifies both kernels' rounding beyond a fixed fp32 bound, so only a tolerance that
// follows the case's conditioning accepts it.
// Must be accepted (`ok`).
#include "kb_problem.h"

constexpr int kBatch = static_cast<int>(KB_IN_X_DIM0);
constexpr int kIn = static_cast<int>(KB_IN_X_DIM1);
constexpr int kHeight = static_cast<int>(KB_IN_X_DIM2);
constexpr int kWidth = static_cast<int>(KB_IN_X_DIM3);
constexpr int kOut = static_cast<int>(KB_PARAM_CONV_WEIGHT_DIM0);
constexpr int kKernel = static_cast<int>(KB_PARAM_CONV_WEIGHT_DIM2);
constexpr int kOutH = kHeight - kKernel + 1, kOutW = kWidth - kKernel + 1;
static_assert(KB_PARAM_CONV_WEIGHT_DIM1 == kIn && KB_PARAM_CONV_WEIGHT_DIM3 == kKernel, "weight [out, in, k, k]");
static_assert(KB_OUT_OUT_DIM2 == kOutH && KB_OUT_OUT_DIM3 == kOutW, "valid convolution");
constexpr float kInverseDivisor = static_cast<float>(1.0 / KB_INIT_DIVIDE_BY);
constexpr float kEpsilon = 1e-5f;  // nn.InstanceNorm2d's default
constexpr int kTile = 16, kChannels = 16, kHalo = kTile + kKernel - 1;
static_assert(kOut % kChannels == 0, "output channels divide the channel group");
constexpr int kTilesX = (kOutW + kTile - 1) / kTile, kTilesY = (kOutH + kTile - 1) / kTile;

__global__ void convolution(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b,
                            float* __restrict__ y) {
  __shared__ float tile[kHalo][kHalo];
  __shared__ float weights[kChannels][kKernel * kKernel];
  const int tx = threadIdx.x % kTile, ty = threadIdx.x / kTile;
  const int ox0 = (blockIdx.x % kTilesX) * kTile, oy0 = (blockIdx.x / kTilesX) * kTile;
  const int co0 = blockIdx.y * kChannels, n = blockIdx.z;
  float acc[kChannels] = {};
  for (int ci = 0; ci < kIn; ++ci) {
    const float* plane = x + (static_cast<int64_t>(n) * kIn + ci) * kHeight * kWidth;
    for (int i = threadIdx.x; i < kHalo * kHalo; i += kTile * kTile) {
      const int iy = oy0 + i / kHalo, ix = ox0 + i % kHalo;
      tile[i / kHalo][i % kHalo] = (iy < kHeight && ix < kWidth) ? plane[iy * kWidth + ix] : 0.0f;
    }
    for (int i = threadIdx.x; i < kChannels * kKernel * kKernel; i += kTile * kTile) {
      const int c = i / (kKernel * kKernel), tap = i % (kKernel * kKernel);
      weights[c][tap] = w[((static_cast<int64_t>(co0 + c)) * kIn + ci) * kKernel * kKernel + tap];
    }
    __syncthreads();
#pragma unroll
    for (int ky = 0; ky < kKernel; ++ky)
#pragma unroll
      for (int kx = 0; kx < kKernel; ++kx) {
        const float v = tile[ty + ky][tx + kx];
#pragma unroll
        for (int c = 0; c < kChannels; ++c) acc[c] = fmaf(v, weights[c][ky * kKernel + kx], acc[c]);
      }
    __syncthreads();
  }
  const int oy = oy0 + ty, ox = ox0 + tx;
  if (oy >= kOutH || ox >= kOutW) return;
  for (int c = 0; c < kChannels; ++c) {
    y[((static_cast<int64_t>(n) * kOut + co0 + c) * kOutH + oy) * kOutW + ox] = acc[c] + b[co0 + c];
  }
}

constexpr int kNormThreads = 512;

__device__ float block_sum(float value, float* scratch) {
  for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = value;
  __syncthreads();
  float total = 0.0f;
  for (int i = 0; i < kNormThreads / 32; ++i) total += scratch[i];
  __syncthreads();
  return total;
}

// One block per (n, c) plane, in place: mean, then the biased variance about it, then normalise and divide.
__global__ void instance_norm_divide(float* __restrict__ y) {
  __shared__ float scratch[kNormThreads / 32];
  constexpr int kPlane = kOutH * kOutW;
  float* plane = y + static_cast<int64_t>(blockIdx.x) * kPlane;
  float sum = 0.0f;
  for (int i = threadIdx.x; i < kPlane; i += kNormThreads) sum += plane[i];
  const float mean = block_sum(sum, scratch) / kPlane;
  float squares = 0.0f;
  for (int i = threadIdx.x; i < kPlane; i += kNormThreads) {
    const float d = plane[i] - mean;
    squares = fmaf(d, d, squares);
  }
  const float variance = block_sum(squares, scratch) / kPlane;
  const float inverse = 1.0f / sqrtf(variance + kEpsilon);
  for (int i = threadIdx.x; i < kPlane; i += kNormThreads) plane[i] = (plane[i] - mean) * inverse * kInverseDivisor;
}

extern "C" int kb_forward(const KBTensor* inputs, const KBTensor* params, KBTensor* outputs, cudaStream_t stream) {
  const float* x = static_cast<const float*>(inputs[KB_IN_X].data);
  const float* w = static_cast<const float*>(params[KB_PARAM_CONV_WEIGHT].data);
  const float* b = static_cast<const float*>(params[KB_PARAM_CONV_BIAS].data);
  float* y = static_cast<float*>(outputs[KB_OUT_OUT].data);
  convolution<<<dim3(kTilesX * kTilesY, kOut / kChannels, kBatch), kTile * kTile, 0, stream>>>(x, w, b, y);
  instance_norm_divide<<<kBatch * kOut, kNormThreads, 0, stream>>>(y);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
