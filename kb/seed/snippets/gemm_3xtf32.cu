// Tensor-core GEMM within strict fp32 tolerance: 3xTF32 (wmma, sm_80+). x = hi + lo, both tf32; all
// products but lo*lo give ~1e-6 error (plain TF32: ~3e-4, fails strict); inf/NaN only in hi*hi.
// C = ep(A * B), A [M,K], B [K,N] or [N,K] (Linear weight) if kBT; zero-padded 64x64 tiles: any M, N, K.
#include <cstdint>
#include <mma.h>
using namespace nvcuda;

template <typename F>  // fin (hi if finite) and lo are 0 for inf/NaN: inf * 0 would make NaN
__device__ void split_tf32(F& hi, F& fin, F& lo) {
  for (int e = 0; e < hi.num_elements; ++e) {
    const float x = hi.x[e], h = wmma::__float_to_tf32(x);
    hi.x[e] = h;
    fin.x[e] = isfinite(x) ? h : 0.0f;
    lo.x[e] = isfinite(x) ? wmma::__float_to_tf32(x - h) : 0.0f;
  }
}

template <bool kBT, typename Epilogue>
__global__ void __launch_bounds__(128) gemm_3xtf32(int M, int N, int K, const float* __restrict__ A,
                                                   const float* __restrict__ B, float* __restrict__ C, Epilogue ep) {
  __shared__ __align__(32) float As[64][32 + 4];  // As[m][k]; wmma needs 32-byte-aligned fragment rows
  __shared__ __align__(32) float Bs[32][64 + 4];  // Bs[k][n]
  __shared__ __align__(32) float Cs[64][64 + 4];
  const int t = threadIdx.x, wm = t / 64 * 32, wn = t / 32 % 2 * 32, m0 = blockIdx.y * 64, n0 = blockIdx.x * 64;
  wmma::fragment<wmma::accumulator, 16, 16, 8, float> acc[4];  // the warp's 2x2 of 16x16
  for (auto& c : acc) wmma::fill_fragment(c, 0.0f);
  for (int k0 = 0; k0 < K; k0 += 32) {
    for (int e = t; e < 64 * 32; e += 128) {
      const int r = e / 32, k = e % 32, kb = e / 64, c = e % 64;  // reads follow rows: coalesced
      As[r][k] = m0 + r < M && k0 + k < K ? A[int64_t(m0 + r) * K + k0 + k] : 0.0f;
      if constexpr (kBT)
        Bs[k][r] = n0 + r < N && k0 + k < K ? B[int64_t(n0 + r) * K + k0 + k] : 0.0f;
      else
        Bs[kb][c] = k0 + kb < K && n0 + c < N ? B[int64_t(k0 + kb) * N + n0 + c] : 0.0f;
    }
    __syncthreads();
    for (int kk = 0; kk < 32; kk += 8) {
      wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> a[2], a_fin[2], a_lo[2];
      wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> b[2], b_fin[2], b_lo[2];
      for (int i = 0; i < 2; ++i) {
        wmma::load_matrix_sync(a[i], &As[wm + i * 16][kk], 32 + 4);
        wmma::load_matrix_sync(b[i], &Bs[kk][wn + i * 16], 64 + 4);
        split_tf32(a[i], a_fin[i], a_lo[i]);
        split_tf32(b[i], b_fin[i], b_lo[i]);
      }
      for (int i = 0; i < 4; ++i) {  // the small terms first, then hi*hi
        wmma::mma_sync(acc[i], a_lo[i / 2], b_fin[i % 2], acc[i]);
        wmma::mma_sync(acc[i], a_fin[i / 2], b_lo[i % 2], acc[i]);
        wmma::mma_sync(acc[i], a[i / 2], b[i % 2], acc[i]);
      }
    }
    __syncthreads();
  }
  for (int i = 0; i < 4; ++i)
    wmma::store_matrix_sync(&Cs[wm + i / 2 * 16][wn + i % 2 * 16], acc[i], 64 + 4, wmma::mem_row_major);
  __syncthreads();
  for (int e = t; e < 64 * 64; e += 128) {
    const int row = m0 + e / 64, col = n0 + e % 64;
    if (row < M && col < N) C[int64_t(row) * N + col] = ep(row, col, Cs[e / 64][e % 64]);
  }
}
