// 3xTF32 GEMM on tensor cores (wmma, cp.async; sm_80+) within strict fp32 tolerance: x = hi + lo, both tf32.
// C = ep(row, col, A*B): A [M,K], B [K,N], or [N,K] if kBT; any M, N, K. 128x128 tiles, 8 warps of 64x32, K 32
// at a time, 2-stage pipeline, 72 KiB dynamic smem: call launch_gemm_3xtf32. Each K tile sums in a fresh
// fragment, added to the total in fp32 (tensor cores truncate their sums: keep them short).
#include <cstdint>
#include <cuda_pipeline.h>
#include <mma.h>
#include <type_traits>
using namespace nvcuda::wmma;
constexpr int kLd = 36, kLdB = 132, kStage = 256 * kLd, kSmem = 8 * kStage;  // floats a row, a stage; bytes
template <typename U, typename L = row_major> using Frag = fragment<U, 16, 16, 8, precision::tf32, L>;
using Acc = fragment<accumulator, 16, 16, 8, float>;

template <typename F>  // inf/NaN only in hi*hi: fin (hi if finite) and lo are 0 there, as inf * 0 = NaN
__device__ void split_tf32(F& hi, F& fin, F& lo) {
  for (int e = 0; e < hi.num_elements; ++e) {
    const float x = hi.x[e], h = __float_to_tf32(x);
    hi.x[e] = h;
    fin.x[e] = isfinite(x) ? h : 0.0f;
    lo.x[e] = isfinite(x) ? __float_to_tf32(x - h) : 0.0f;
  }
}

template <int kR, int kC>  // g [rows, cols] from (r0, c0) into s (ld a row); outside g: src-size 0 writes 0
__device__ void load_tile(float* s, int ld, const float* g, int rows, int cols, int r0, int c0) {
  for (int c = threadIdx.x; c < kR * kC; c += 256) {
    const int r = r0 + c / kC, k = c0 + c % kC;
    const bool in = r < rows && k < cols;
    __pipeline_memcpy_async(s + c / kC * ld + c % kC, in ? g + int64_t(r) * cols + k : g, 4, in ? 0 : 4);
  }
}

template <bool kBT, typename Epilogue>
__global__ void __launch_bounds__(256) gemm_3xtf32(int M, int N, int K, const float* A, const float* B, float* C,
                                                   Epilogue ep) {
  extern __shared__ __align__(128) float smem[];  // a stage: A [m][k], then B [n][k] if kBT, else [k][n]
  const int w = threadIdx.x / 32, wm = w / 4 * 64, wn = w % 4 * 32, m0 = blockIdx.y * 128, n0 = blockIdx.x * 128;
  auto copy_tile = [&](int t) {
    float* as = smem + t % 2 * kStage;
    load_tile<128, 32>(as, kLd, A, M, K, m0, t * 32);
    if constexpr (kBT) load_tile<128, 32>(as + 128 * kLd, kLd, B, N, K, n0, t * 32);
    else load_tile<32, 128>(as + 128 * kLd, kLdB, B, K, N, t * 32, n0);
  };
  Acc acc[8], part[8];  // the warp's 4x2 fragments: the total, and this K tile's sum
  for (Acc& f : acc) fill_fragment(f, 0.0f);
  copy_tile(0);
  __pipeline_commit();
  for (int t = 0; t * 32 < K; ++t) {
    if ((t + 1) * 32 < K) copy_tile(t + 1);  // into the stage the last __syncthreads freed
    __pipeline_commit();       // (empty on the last tile)
    __pipeline_wait_prior(1);  // this thread's copies of tile t have landed...
    __syncthreads();           // ...and every thread's
    const float *as = smem + t % 2 * kStage, *bs = as + 128 * kLd;
    for (Acc& f : part) fill_fragment(f, 0.0f);
    for (int kk = 0; kk < 32; kk += 8) {
      Frag<matrix_b, std::conditional_t<kBT, col_major, row_major>> b[2], b_fin[2], b_lo[2];
      for (int j = 0; j < 2; ++j) {
        const int n = wn + j * 16;
        load_matrix_sync(b[j], bs + (kBT ? n * kLd + kk : kk * kLdB + n), kBT ? kLd : kLdB);
        split_tf32(b[j], b_fin[j], b_lo[j]);
      }
      for (int i = 0; i < 4; ++i) {
        Frag<matrix_a> a, a_fin, a_lo;
        load_matrix_sync(a, as + (wm + i * 16) * kLd + kk, kLd);
        split_tf32(a, a_fin, a_lo);
        for (int j = 0; j < 2; ++j) {  // the small terms first, then hi*hi
          Acc& p = part[i * 2 + j];
          mma_sync(p, a_lo, b_fin[j], p);
          mma_sync(p, a_fin, b_lo[j], p);
          mma_sync(p, a, b[j], p);
        }
      }
    }
    for (int f = 0; f < 8; ++f)
      for (int e = 0; e < Acc::num_elements; ++e) acc[f].x[e] += part[f].x[e];
    __syncthreads();  // all warps are done with this stage before tile t + 2 is copied in
  }
  __pipeline_wait_prior(0);
  __syncthreads();  // the stages become each warp's 64x32 output tile
  float* out = smem + w * 64 * 32;
  for (int f = 0; f < 8; ++f) store_matrix_sync(out + f / 2 * 512 + f % 2 * 16, acc[f], 32, mem_row_major);
  __syncwarp();
  for (int e = threadIdx.x % 32; e < 64 * 32; e += 32) {
    const int row = m0 + wm + e / 32, col = n0 + wn + e % 32;
    if (row < M && col < N) C[int64_t(row) * N + col] = ep(row, col, out[e]);
  }
}

template <bool kBT, typename Ep>
cudaError_t launch_gemm_3xtf32(int M, int N, int K, const float* A, const float* B, float* C, cudaStream_t s, Ep ep) {
  cudaFuncSetAttribute(gemm_3xtf32<kBT, Ep>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  gemm_3xtf32<kBT><<<dim3((N + 127) / 128, (M + 127) / 128), 256, kSmem, s>>>(M, N, K, A, B, C, ep);
  return cudaGetLastError();
}
