// Unusual but correct (problem: gemm_bias_relu). Three kernels per call on `stream`, each finishing before
// the next starts (stream order): a 16x16 shared-memory-tiled GEMM writes x @ W^T into y, a second kernel
// adds the bias in place, a third applies ReLU in place. The first kernel writes every element of y before
// the others read it, so the poisoned output is never read.
#include "kb_problem.h"

constexpr int kM = static_cast<int>(KB_IN_X_DIM0);
constexpr int kK = static_cast<int>(KB_IN_X_DIM1);
constexpr int kN = static_cast<int>(KB_PARAM_LINEAR_WEIGHT_DIM0);
static_assert(KB_PARAM_LINEAR_WEIGHT_DIM1 == kK, "W is [out_features, in_features]");
static_assert(KB_OUT_OUT_DIM0 == kM && KB_OUT_OUT_DIM1 == kN, "y is [batch, out_features]");
constexpr int64_t kNumel = static_cast<int64_t>(kM) * kN;

constexpr int kTile = 16;

__global__ void matmul_tiled(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y) {
  __shared__ float xs[kTile][kTile];      // xs[m][k]
  __shared__ float ws[kTile][kTile + 1];  // ws[n][k], padded against bank conflicts
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int m = blockIdx.y * kTile + ty;
  const int n = blockIdx.x * kTile + tx;
  const int w_row = blockIdx.x * kTile + ty;  // W row this thread loads
  float acc = 0.0f;
  for (int k0 = 0; k0 < kK; k0 += kTile) {
    const int k = k0 + tx;
    xs[ty][tx] = (m < kM && k < kK) ? x[static_cast<int64_t>(m) * kK + k] : 0.0f;
    ws[ty][tx] = (w_row < kN && k < kK) ? w[static_cast<int64_t>(w_row) * kK + k] : 0.0f;
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kTile; ++kk) acc = fmaf(xs[ty][kk], ws[tx][kk], acc);
    __syncthreads();
  }
  if (m < kM && n < kN) y[static_cast<int64_t>(m) * kN + n] = acc;
}

__global__ void add_bias(float* __restrict__ y, const float* __restrict__ b) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < kNumel) y[i] += b[i % kN];
}

__global__ void relu_in_place(float* __restrict__ y) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < kNumel) {
    const float v = y[i];
    y[i] = v < 0.0f ? 0.0f : v;  // keeps NaN, like torch.relu (fmaxf would not)
  }
}

extern "C" int kb_forward(const KBTensor* inputs, const KBTensor* params, KBTensor* outputs, cudaStream_t stream) {
  const float* x = static_cast<const float*>(inputs[KB_IN_X].data);
  const float* w = static_cast<const float*>(params[KB_PARAM_LINEAR_WEIGHT].data);
  const float* b = static_cast<const float*>(params[KB_PARAM_LINEAR_BIAS].data);
  float* y = static_cast<float*>(outputs[KB_OUT_OUT].data);
  const dim3 tile(kTile, kTile);
  const dim3 grid((kN + kTile - 1) / kTile, (kM + kTile - 1) / kTile);
  matmul_tiled<<<grid, tile, 0, stream>>>(x, w, y);
  const unsigned blocks = static_cast<unsigned>((kNumel + 255) / 256);
  add_bias<<<blocks, 256, 0, stream>>>(y, b);
  relu_in_place<<<blocks, 256, 0, stream>>>(y);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
