// CHEATER (problem: gemm_bias_relu) — a correct GEMM + bias whose ReLU is fmaxf(v, 0): fmaxf returns the
// non-NaN operand, so a NaN pre-activation becomes 0 where torch.relu keeps NaN. Right for every finite
// input; wrong as soon as a NaN reaches the output (a NaN in x makes its whole output row NaN).
// Must be rejected by: special_values (NaN in the inputs).
#include "kb_problem.h"

constexpr int kM = static_cast<int>(KB_IN_X_DIM0);
constexpr int kK = static_cast<int>(KB_IN_X_DIM1);
constexpr int kN = static_cast<int>(KB_PARAM_LINEAR_WEIGHT_DIM0);
static_assert(KB_PARAM_LINEAR_WEIGHT_DIM1 == kK, "W is [out_features, in_features]");
constexpr int kTile = 16;

__global__ void gemm_bias_fmaxf_relu(const float* __restrict__ x, const float* __restrict__ w,
                                     const float* __restrict__ b, float* __restrict__ y) {
  __shared__ float xs[kTile][kTile];
  __shared__ float ws[kTile][kTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int m = blockIdx.y * kTile + ty;
  const int n = blockIdx.x * kTile + tx;
  const int w_row = blockIdx.x * kTile + ty;
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
  if (m < kM && n < kN) y[static_cast<int64_t>(m) * kN + n] = fmaxf(acc + b[n], 0.0f);  // the cheat
}

extern "C" int kb_forward(const KBTensor* inputs, const KBTensor* params, KBTensor* outputs, cudaStream_t stream) {
  const float* x = static_cast<const float*>(inputs[KB_IN_X].data);
  const float* w = static_cast<const float*>(params[KB_PARAM_LINEAR_WEIGHT].data);
  const float* b = static_cast<const float*>(params[KB_PARAM_LINEAR_BIAS].data);
  float* y = static_cast<float*>(outputs[KB_OUT_OUT].data);
  const dim3 tile(kTile, kTile);
  const dim3 grid((kN + kTile - 1) / kTile, (kM + kTile - 1) / kTile);
  gemm_bias_fmaxf_relu<<<grid, tile, 0, stream>>>(x, w, b, y);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
