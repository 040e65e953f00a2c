// HONEST (problem: level3/43_MinGPTCausalAttention) — causal attention that skips masked work, as flash-style
// kernels do: query row s reads keys and values 0..s only, never a later token. Where a special value sits in a
// later token, PyTorch's `att @ v` makes the earlier rows NaN (0 * Inf); this kernel keeps them finite, which is
// what the mathematics says. QKV and output projections are tiled fp32 GEMMs; the attention is one warp per
// query row with an online softmax.
// Must be accepted (`ok`).
#include "kb_problem.h"

#include <cfloat>

constexpr int kBatch = static_cast<int>(KB_IN_X_DIM0);
constexpr int kTokens = static_cast<int>(KB_IN_X_DIM1);
constexpr int kEmbed = static_cast<int>(KB_IN_X_DIM2);
constexpr int kHeads = static_cast<int>(KB_INIT_N_HEAD);
constexpr int kHeadDim = kEmbed / kHeads;
constexpr int kRows = kBatch * kTokens;
static_assert(kHeadDim == 96, "each lane holds three of a head's 96 dimensions");
static_assert(KB_PARAM_C_ATTN_WEIGHT_DIM0 == 3 * kEmbed && KB_PARAM_C_ATTN_WEIGHT_DIM1 == kEmbed, "c_attn");
static_assert(KB_PARAM_C_PROJ_WEIGHT_DIM0 == kEmbed && KB_PARAM_C_PROJ_WEIGHT_DIM1 == kEmbed, "c_proj");

constexpr int kTileM = 64, kTileN = 64, kTileK = 16;
static_assert(kRows % kTileM == 0 && kEmbed % kTileN == 0 && kEmbed % kTileK == 0, "sizes divide the tiles");

// C[m][n] = sum_k A[m][k] * W[n][k] + b[n]: 256 threads, each a 4x4 block of a 64x64 tile.
__global__ void linear(const float* __restrict__ a, const float* __restrict__ w, const float* __restrict__ b,
                       float* __restrict__ c, int n_total, int k_total) {
  __shared__ float as[kTileK][kTileM + 1];
  __shared__ float ws[kTileK][kTileN + 1];
  const int tid = threadIdx.x;
  const int row0 = blockIdx.y * kTileM, col0 = blockIdx.x * kTileN;
  const int ty = tid / 16, tx = tid % 16;
  float acc[4][4] = {};
  for (int k0 = 0; k0 < k_total; k0 += kTileK) {
    for (int i = tid; i < kTileM * kTileK; i += 256) {
      const int r = i / kTileK, kk = i % kTileK;
      as[kk][r] = a[static_cast<int64_t>(row0 + r) * k_total + k0 + kk];
      ws[kk][r] = w[static_cast<int64_t>(col0 + r) * k_total + k0 + kk];
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kTileK; ++kk) {
      float av[4], wv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) av[i] = as[kk][ty * 4 + i];
#pragma unroll
      for (int j = 0; j < 4; ++j) wv[j] = ws[kk][tx * 4 + j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(av[i], wv[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int col = col0 + tx * 4 + j;
      c[static_cast<int64_t>(row0 + ty * 4 + i) * n_total + col] = acc[i][j] + b[col];
    }
}

// One warp per (batch, head, query row s): keys and values 0..s only. The running maximum starts at -FLT_MAX,
// not -Inf, so a score of -Inf gives weight exp(-Inf) = 0 rather than exp(-Inf - -Inf) = NaN.
__global__ void causal_attention(const float* __restrict__ qkv, float* __restrict__ y) {
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= kBatch * kHeads * kTokens) return;
  const int s = warp % kTokens;
  const int h = (warp / kTokens) % kHeads;
  const int batch = warp / (kTokens * kHeads);
  const int64_t stride = 3 * kEmbed;
  const float* base = qkv + static_cast<int64_t>(batch) * kTokens * stride + h * kHeadDim;
  const float scale = 1.0f / sqrtf(static_cast<float>(kHeadDim));
  float q[3], acc[3] = {0.0f, 0.0f, 0.0f};
  for (int i = 0; i < 3; ++i) q[i] = base[s * stride + lane + 32 * i];
  float running_max = -FLT_MAX, total = 0.0f;
  for (int j = 0; j <= s; ++j) {
    const float* key = base + j * stride + kEmbed;
    float dot = 0.0f;
    for (int i = 0; i < 3; ++i) dot = fmaf(q[i], key[lane + 32 * i], dot);
    for (int offset = 16; offset > 0; offset /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
    const float score = dot * scale;
    const float new_max = fmaxf(running_max, score);
    const float correction = expf(running_max - new_max);
    const float weight = expf(score - new_max);
    total = total * correction + weight;
    const float* value = key + kEmbed;
    for (int i = 0; i < 3; ++i) acc[i] = fmaf(weight, value[lane + 32 * i], acc[i] * correction);
    running_max = new_max;
  }
  float* out = y + (static_cast<int64_t>(batch) * kTokens + s) * kEmbed + h * kHeadDim;
  for (int i = 0; i < 3; ++i) out[lane + 32 * i] = acc[i] / total;
}

extern "C" int kb_forward(const KBTensor* inputs, const KBTensor* params, KBTensor* outputs, cudaStream_t stream) {
  const float* x = static_cast<const float*>(inputs[KB_IN_X].data);
  const float* w_attn = static_cast<const float*>(params[KB_PARAM_C_ATTN_WEIGHT].data);
  const float* b_attn = static_cast<const float*>(params[KB_PARAM_C_ATTN_BIAS].data);
  const float* w_proj = static_cast<const float*>(params[KB_PARAM_C_PROJ_WEIGHT].data);
  const float* b_proj = static_cast<const float*>(params[KB_PARAM_C_PROJ_BIAS].data);
  float* out = static_cast<float*>(outputs[KB_OUT_OUT].data);
  float* qkv = nullptr;
  float* y = nullptr;
  const size_t qkv_bytes = sizeof(float) * kRows * 3 * kEmbed, y_bytes = sizeof(float) * kRows * kEmbed;
  if (cudaMallocAsync(reinterpret_cast<void**>(&qkv), qkv_bytes, stream) != cudaSuccess) return 1;
  if (cudaMallocAsync(reinterpret_cast<void**>(&y), y_bytes, stream) != cudaSuccess) return 1;
  linear<<<dim3(3 * kEmbed / kTileN, kRows / kTileM), 256, 0, stream>>>(x, w_attn, b_attn, qkv, 3 * kEmbed, kEmbed);
  const int warps = kBatch * kHeads * kTokens;
  causal_attention<<<(warps * 32 + 255) / 256, 256, 0, stream>>>(qkv, y);
  linear<<<dim3(kEmbed / kTileN, kRows / kTileM), 256, 0, stream>>>(y, w_proj, b_proj, out, kEmbed, kEmbed);
  if (cudaFreeAsync(y, stream) != cudaSuccess || cudaFreeAsync(qkv, stream) != cudaSuccess) return 1;
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
