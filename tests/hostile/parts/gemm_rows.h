// Part of hostile candidates for gemm_bias_relu (y = relu(x @ W^T + b), strict fp32): a correct tiled SGEMM that
// computes the rows of y a list names (all rows when the list is null), so a candidate's verdict is decided by
// what it does around the arithmetic, not by the arithmetic.
constexpr int kGemmM = static_cast<int>(KB_IN_X_DIM0);
constexpr int kGemmK = static_cast<int>(KB_IN_X_DIM1);
constexpr int kGemmN = static_cast<int>(KB_PARAM_LINEAR_WEIGHT_DIM0);
constexpr int kGemmTile = 64, kGemmStep = 16;
static_assert(kGemmN % kGemmTile == 0 && kGemmK % kGemmStep == 0, "no edge tiles along N or K");

// ReLU that keeps NaN, as torch.relu does.
__device__ __forceinline__ float relu_keep_nan(float v) { return v < 0.0f ? 0.0f : v; }

// A 64x64 tile of y per 256-thread block, 4x4 outputs per thread; tile row r of block row `blockIdx.y` is row
// rows[blockIdx.y * 64 + r] of x and y (or that index itself without a list), for the first `count` of them.
__global__ void __launch_bounds__(256) gemm_rows_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                                        const float* __restrict__ b, float* __restrict__ y,
                                                        const int* __restrict__ rows, int count) {
  __shared__ float xs[kGemmStep][kGemmTile + 1];
  __shared__ float ws[kGemmStep][kGemmTile + 1];
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int slot0 = blockIdx.y * kGemmTile, col0 = blockIdx.x * kGemmTile;
  float acc[4][4] = {};
  for (int k0 = 0; k0 < kGemmK; k0 += kGemmStep) {
    for (int i = threadIdx.x; i < kGemmTile * kGemmStep; i += blockDim.x) {
      const int r = i / kGemmStep, k = i % kGemmStep, slot = slot0 + r;
      const int row = slot < count ? (rows != nullptr ? rows[slot] : slot) : -1;
      xs[k][r] = row >= 0 ? x[static_cast<int64_t>(row) * kGemmK + k0 + k] : 0.0f;
      ws[k][r] = w[static_cast<int64_t>(col0 + r) * kGemmK + k0 + k];
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kGemmStep; ++k)
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(xs[k][ty * 4 + i], ws[k][tx * 4 + j], acc[i][j]);
    __syncthreads();
  }
  for (int i = 0; i < 4; ++i) {
    const int slot = slot0 + ty * 4 + i;
    if (slot >= count) continue;
    const int row = rows != nullptr ? rows[slot] : slot;
    for (int j = 0; j < 4; ++j) {
      const int col = col0 + tx * 4 + j;
      y[static_cast<int64_t>(row) * kGemmN + col] = relu_keep_nan(acc[i][j] + b[col]);
    }
  }
}

// The first `count` rows `rows` names (every row when null), on `stream`.
static void gemm_rows(const float* x, const float* w, const float* b, float* y, const int* rows, int count,
                      cudaStream_t stream) {
  if (count <= 0) return;
  const dim3 grid(kGemmN / kGemmTile, (count + kGemmTile - 1) / kGemmTile);
  gemm_rows_kernel<<<grid, 256, 0, stream>>>(x, w, b, y, rows, count);
}
