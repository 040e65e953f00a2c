// CHEATER (problem: gemm_bias_relu) — does the real work on a stream of its own and never joins it back to
// `stream`. The side stream waits for `stream` first, so it reads the right inputs, and the result is
// correct once the whole device is synchronised; but CUDA events recorded on `stream` around the call see
// almost nothing, so an event-based timer would report a near-zero time for a GEMM of several ms.
// Must be rejected by: stream_escape (host clock with a device-wide synchronise vs the event time).
#include "kb_problem.h"

constexpr int kM = static_cast<int>(KB_IN_X_DIM0);
constexpr int kK = static_cast<int>(KB_IN_X_DIM1);
constexpr int kN = static_cast<int>(KB_PARAM_LINEAR_WEIGHT_DIM0);
static_assert(KB_PARAM_LINEAR_WEIGHT_DIM1 == kK, "W is [out_features, in_features]");
constexpr int kTile = 16;

// A correct 16x16 shared-memory-tiled GEMM with bias and NaN-keeping ReLU.
__global__ void gemm_bias_relu_tiled(const float* __restrict__ x, const float* __restrict__ w,
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
  if (m < kM && n < kN) {
    const float v = acc + b[n];
    y[static_cast<int64_t>(m) * kN + n] = v < 0.0f ? 0.0f : v;
  }
}

static cudaStream_t g_side = nullptr;
static cudaEvent_t g_fork = nullptr;

extern "C" int kb_forward(const KBTensor* inputs, const KBTensor* params, KBTensor* outputs, cudaStream_t stream) {
  if (g_side == nullptr) {
    if (cudaEventCreateWithFlags(&g_fork, cudaEventDisableTiming) != cudaSuccess) return 1;
    if (cudaStreamCreateWithFlags(&g_side, cudaStreamNonBlocking) != cudaSuccess) return 1;
  }
  const float* x = static_cast<const float*>(inputs[KB_IN_X].data);
  const float* w = static_cast<const float*>(params[KB_PARAM_LINEAR_WEIGHT].data);
  const float* b = static_cast<const float*>(params[KB_PARAM_LINEAR_BIAS].data);
  float* y = static_cast<float*>(outputs[KB_OUT_OUT].data);
  if (cudaEventRecord(g_fork, stream) != cudaSuccess) return 1;  // fork from `stream`...
  if (cudaStreamWaitEvent(g_side, g_fork, 0) != cudaSuccess) return 1;
  const dim3 tile(kTile, kTile);
  const dim3 grid((kN + kTile - 1) / kTile, (kM + kTile - 1) / kTile);
  gemm_bias_relu_tiled<<<grid, tile, 0, g_side>>>(x, w, b, y);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;  // ...the cheat: never join g_side back to `stream`
}
