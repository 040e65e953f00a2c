// Tiled SGEMM, strict fp32 (FFMA only): C = epilogue(A * B), A [M,K], B [K,N] or [N,K] (nn.Linear weight)
// if kBT. A block makes a 64x64 tile of C, a thread 4x4 in registers (each shared load feeds 4 FMAs); K goes
// 16 at a time through k-major shared tiles (float4 reads). Any M, N, K: edge loads read 0, edge stores are
// skipped. Batched: offset A, B, C by blockIdx.z. Next: float4 global loads, double buffering, 128x128 tiles.
#include <cstdint>

struct StoreAcc {  // an epilogue maps (row, col, acc) to what C gets: add bias, activate, scale...
  __device__ float operator()(int, int, float acc) const { return acc; }
};

template <bool kBT, typename Epilogue>
__global__ void __launch_bounds__(256) sgemm_tiled(int M, int N, int K, const float* __restrict__ A,
                                                   const float* __restrict__ B, float* __restrict__ C, Epilogue ep) {
  __shared__ __align__(16) float As[16][64 + 4];  // As[k][m]; the pad spreads the transposing stores over banks
  __shared__ __align__(16) float Bs[16][64 + 4];  // Bs[k][n]
  const int t = threadIdx.x, tx = t % 16, ty = t / 16, m0 = blockIdx.y * 64, n0 = blockIdx.x * 64;
  float acc[4][4] = {};
  for (int k0 = 0; k0 < K; k0 += 16) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = t / 4, k = t % 4 * 4 + i, kb = t / 16, c = t % 16 * 4 + i;  // reads follow rows: coalesced
      As[k][r] = m0 + r < M && k0 + k < K ? A[int64_t(m0 + r) * K + k0 + k] : 0.0f;
      if constexpr (kBT)
        Bs[k][r] = n0 + r < N && k0 + k < K ? B[int64_t(n0 + r) * K + k0 + k] : 0.0f;
      else
        Bs[kb][c] = k0 + kb < K && n0 + c < N ? B[int64_t(k0 + kb) * N + n0 + c] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < 16; ++k) {
      const float4 a = *reinterpret_cast<const float4*>(&As[k][ty * 4]);
      const float4 b = *reinterpret_cast<const float4*>(&Bs[k][tx * 4]);
      const float av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
      for (int i = 0; i < 16; ++i) acc[i / 4][i % 4] = fmaf(av[i / 4], bv[i % 4], acc[i / 4][i % 4]);
    }
    __syncthreads();  // before the next tiles overwrite these
  }
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const int row = m0 + ty * 4 + i / 4, col = n0 + tx * 4 + i % 4;
    if (row < M && col < N) C[int64_t(row) * N + col] = ep(row, col, acc[i / 4][i % 4]);
  }
}

template <bool kBT, typename Epilogue = StoreAcc>
cudaError_t launch_sgemm(int M, int N, int K, const float* A, const float* B, float* C, cudaStream_t stream,
                         Epilogue ep = {}) {
  sgemm_tiled<kBT><<<dim3((N + 63) / 64, (M + 63) / 64), 256, 0, stream>>>(M, N, K, A, B, C, ep);
  return cudaGetLastError();
}
