// Fast candidate for gemm_bias_relu: y = relu(x @ W^T + b), x [M, K], W [N, K], b [N], strict fp32.
// Why it is fast: a shared-memory-tiled, register-blocked SGEMM. Each 256-thread block computes a 128x128
// tile of y; each thread an 8x8 sub-tile held in 64 registers, so every value read from shared memory feeds
// 8 FFMAs. K advances 8 at a time through two shared-memory buffers: the next tile is fetched into
// registers while the current one is multiplied, then stored to the other buffer (one barrier per step).
// Tiles are stored k-major (transposed) so the inner loop reads float4s: A reads are warp broadcasts,
// B reads are conflict-free, and a 4-float pad makes the transposing stores conflict-free too.
// Bias and ReLU are fused into the epilogue, so y is written once. Plain FFMA only: no TF32, no tensor
// cores, fp32 accumulation in K order per thread (relative L2 error ~1e-6 against cuBLAS fp32).
#include "kb_problem.h"

#include <cstdint>

constexpr int kM = static_cast<int>(KB_IN_X_DIM0);
constexpr int kK = static_cast<int>(KB_IN_X_DIM1);
constexpr int kN = static_cast<int>(KB_PARAM_LINEAR_WEIGHT_DIM0);
static_assert(KB_PARAM_LINEAR_WEIGHT_DIM1 == kK, "W is [out_features, in_features]");
static_assert(KB_OUT_OUT_DIM0 == kM && KB_OUT_OUT_DIM1 == kN, "y is [batch, out_features]");

constexpr int kBM = 128, kBN = 128, kBK = 8;  // block tile
constexpr int kThreads = 256;                 // 16 x 16 threads, 8 x 8 outputs each
constexpr int kPad = 4;                       // keeps float4 alignment, removes store bank conflicts
static_assert(kM % kBM == 0 && kN % kBN == 0 && kK % kBK == 0,
              "this kernel has no edge tiles: M and N must be multiples of 128, K of 8");
static_assert(kBM * kBK / 4 == kThreads && kBN * kBK / 4 == kThreads, "one float4 of A and of B per thread");

// ReLU that propagates NaN like torch.relu (fmaxf(v, 0) would turn NaN into 0).
__device__ __forceinline__ float relu(float v) { return v < 0.0f ? 0.0f : v; }

// Four consecutive floats; one 16-byte access when the caller has checked the alignment.
template <bool kVec>
__device__ __forceinline__ float4 load4(const float* p) {
  if constexpr (kVec)
    return __ldg(reinterpret_cast<const float4*>(p));
  else
    return make_float4(__ldg(p), __ldg(p + 1), __ldg(p + 2), __ldg(p + 3));
}

template <bool kVec>
__device__ __forceinline__ void store4(float* p, float4 v) {
  if constexpr (kVec) {
    *reinterpret_cast<float4*>(p) = v;
  } else {
    p[0] = v.x;
    p[1] = v.y;
    p[2] = v.z;
    p[3] = v.w;
  }
}

template <bool kVec>
__global__ void __launch_bounds__(kThreads) gemm_bias_relu_tiled(const float* __restrict__ x,
                                                                 const float* __restrict__ w,
                                                                 const float* __restrict__ bias,
                                                                 float* __restrict__ y) {
  __shared__ __align__(16) float As[2][kBK][kBM + kPad];  // x tile, transposed: As[k][m]
  __shared__ __align__(16) float Bs[2][kBK][kBN + kPad];  // W tile, transposed: Bs[k][n]

  const int tid = threadIdx.x;
  const int tx = tid % 16;  // output columns tx*4..+3 and 64+tx*4..+3 of the tile
  const int ty = tid / 16;  // output rows    ty*4..+3 and 64+ty*4..+3 of the tile
  const int block_m = blockIdx.y * kBM;
  const int block_n = blockIdx.x * kBN;

  // Loader: thread tid fetches 4 consecutive k of tile row tid/2 from x and from W.
  const int load_row = tid / 2;
  const int load_k = (tid % 2) * 4;
  const float* x_src = x + static_cast<int64_t>(block_m + load_row) * kK + load_k;
  const float* w_src = w + static_cast<int64_t>(block_n + load_row) * kK + load_k;

  float acc[8][8];
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;

  float4 a_next = load4<kVec>(x_src);
  float4 b_next = load4<kVec>(w_src);
  As[0][load_k + 0][load_row] = a_next.x;
  As[0][load_k + 1][load_row] = a_next.y;
  As[0][load_k + 2][load_row] = a_next.z;
  As[0][load_k + 3][load_row] = a_next.w;
  Bs[0][load_k + 0][load_row] = b_next.x;
  Bs[0][load_k + 1][load_row] = b_next.y;
  Bs[0][load_k + 2][load_row] = b_next.z;
  Bs[0][load_k + 3][load_row] = b_next.w;
  __syncthreads();

  constexpr int kSteps = kK / kBK;
  for (int step = 0; step < kSteps; ++step) {
    const int cur = step % 2;
    const bool has_next = step + 1 < kSteps;
    if (has_next) {  // prefetch the next K slice into registers; it lands while we compute
      a_next = load4<kVec>(x_src + (step + 1) * kBK);
      b_next = load4<kVec>(w_src + (step + 1) * kBK);
    }
#pragma unroll
    for (int k = 0; k < kBK; ++k) {
      const float4 a0 = *reinterpret_cast<const float4*>(&As[cur][k][ty * 4]);
      const float4 a1 = *reinterpret_cast<const float4*>(&As[cur][k][64 + ty * 4]);
      const float4 b0 = *reinterpret_cast<const float4*>(&Bs[cur][k][tx * 4]);
      const float4 b1 = *reinterpret_cast<const float4*>(&Bs[cur][k][64 + tx * 4]);
      const float a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
      const float b[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    // The other buffer was last read in the previous step, which every thread finished before the barrier
    // that ended it; the barrier below publishes these stores before the next step reads them.
    if (has_next) {
      const int nxt = cur ^ 1;
      As[nxt][load_k + 0][load_row] = a_next.x;
      As[nxt][load_k + 1][load_row] = a_next.y;
      As[nxt][load_k + 2][load_row] = a_next.z;
      As[nxt][load_k + 3][load_row] = a_next.w;
      Bs[nxt][load_k + 0][load_row] = b_next.x;
      Bs[nxt][load_k + 1][load_row] = b_next.y;
      Bs[nxt][load_k + 2][load_row] = b_next.z;
      Bs[nxt][load_k + 3][load_row] = b_next.w;
    }
    __syncthreads();
  }

  // Epilogue: + bias, ReLU, float4 stores. Thread rows/cols: i<4 -> ty*4+i, i>=4 -> 64+ty*4+(i-4).
#pragma unroll
  for (int half_n = 0; half_n < 2; ++half_n) {
    const int col = block_n + half_n * 64 + tx * 4;
    const float4 bv = load4<kVec>(bias + col);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int row = block_m + (i < 4 ? ty * 4 + i : 64 + ty * 4 + (i - 4));
      const float* r = &acc[i][half_n * 4];
      const float4 out = make_float4(relu(r[0] + bv.x), relu(r[1] + bv.y), relu(r[2] + bv.z), relu(r[3] + bv.w));
      store4<kVec>(y + static_cast<int64_t>(row) * kN + col, out);
    }
  }
}

static bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

extern "C" int kb_forward(const KBTensor* inputs, const KBTensor* params, KBTensor* outputs, cudaStream_t stream) {
  const float* x = static_cast<const float*>(inputs[KB_IN_X].data);
  const float* w = static_cast<const float*>(params[KB_PARAM_LINEAR_WEIGHT].data);
  const float* b = static_cast<const float*>(params[KB_PARAM_LINEAR_BIAS].data);
  float* y = static_cast<float*>(outputs[KB_OUT_OUT].data);
  const dim3 grid(kN / kBN, kM / kBM);
  // K, N multiples of 4 (asserted above), so aligned bases make every row start 16-byte aligned.
  if (aligned16(x) && aligned16(w) && aligned16(b) && aligned16(y))
    gemm_bias_relu_tiled<true><<<grid, kThreads, 0, stream>>>(x, w, b, y);
  else
    gemm_bias_relu_tiled<false><<<grid, kThreads, 0, stream>>>(x, w, b, y);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
