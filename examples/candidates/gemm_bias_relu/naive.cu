// Naive candidate for gemm_bias_relu: y = relu(x @ W^T + b), x [M, K], W [N, K], b [N].
// One thread per output element, a plain fp32 dot product over K straight from global memory (no reuse
// through shared memory), then bias and ReLU. Obviously correct and slow.
#include "kb_problem.h"

constexpr int kM = static_cast<int>(KB_IN_X_DIM0);
constexpr int kK = static_cast<int>(KB_IN_X_DIM1);
constexpr int kN = static_cast<int>(KB_PARAM_LINEAR_WEIGHT_DIM0);
static_assert(KB_PARAM_LINEAR_WEIGHT_DIM1 == kK, "W is [out_features, in_features]");
static_assert(KB_OUT_OUT_DIM0 == kM && KB_OUT_OUT_DIM1 == kN, "y is [batch, out_features]");

constexpr int kTile = 16;

// ReLU that propagates NaN like torch.relu (fmaxf(v, 0) would turn NaN into 0).
__device__ __forceinline__ float relu(float v) { return v < 0.0f ? 0.0f : v; }

__global__ void gemm_bias_relu_naive(const float* __restrict__ x, const float* __restrict__ w,
                                     const float* __restrict__ b, float* __restrict__ y) {
  const int n = blockIdx.x * kTile + threadIdx.x;
  const int m = blockIdx.y * kTile + threadIdx.y;
  if (m >= kM || n >= kN) return;
  const float* xr = x + static_cast<int64_t>(m) * kK;
  const float* wr = w + static_cast<int64_t>(n) * kK;
  float acc = 0.0f;
  for (int k = 0; k < kK; ++k) acc = fmaf(xr[k], wr[k], acc);
  y[static_cast<int64_t>(m) * kN + n] = relu(acc + b[n]);
}

extern "C" int kb_forward(const KBTensor* inputs, const KBTensor* params, KBTensor* outputs, cudaStream_t stream) {
  const float* x = static_cast<const float*>(inputs[KB_IN_X].data);
  const float* w = static_cast<const float*>(params[KB_PARAM_LINEAR_WEIGHT].data);
  const float* b = static_cast<const float*>(params[KB_PARAM_LINEAR_BIAS].data);
  float* y = static_cast<float*>(outputs[KB_OUT_OUT].data);
  const dim3 block(kTile, kTile);
  const dim3 grid((kN + kTile - 1) / kTile, (kM + kTile - 1) / kTile);
  gemm_bias_relu_naive<<<grid, block, 0, stream>>>(x, w, b, y);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
