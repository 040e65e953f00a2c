// Inclusive prefix sum (cumsum) of one long row by one block, chunk after chunk with a running carry: each
// thread scans kScanItems consecutive values, a warp scans its threads' totals with __shfl_up_sync, and the
// warps before it add in. Only adds, never subtracts: a NaN or inf reaches exactly the outputs from it on.
#include <cstdint>

constexpr int kScanThreads = 256, kScanItems = 4, kScanChunk = kScanThreads * kScanItems;

__device__ __forceinline__ float warp_inclusive_scan(float v) {
#pragma unroll
  for (int offset = 1; offset < 32; offset *= 2) {
    const float before = __shfl_up_sync(0xffffffffu, v, offset);
    if (threadIdx.x % 32 >= offset) v += before;
  }
  return v;
}

// y[i] = x[0] + ... + x[i] for i < n. Launch with kScanThreads threads; every thread must call it.
__device__ void block_inclusive_scan(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  __shared__ float warp_totals[kScanThreads / 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float carry = 0.0f;  // the sum of the earlier chunks, the same in all threads
  for (int64_t chunk = 0; chunk < n; chunk += kScanChunk) {
    const int64_t first = chunk + static_cast<int64_t>(threadIdx.x) * kScanItems;
    float v[kScanItems];
    float total = 0.0f;
#pragma unroll
    for (int i = 0; i < kScanItems; ++i) v[i] = total += (first + i < n ? x[first + i] : 0.0f);
    const float through_me = warp_inclusive_scan(total);
    float before_me = __shfl_up_sync(0xffffffffu, through_me, 1);
    if (lane == 0) before_me = 0.0f;
    if (lane == 31) warp_totals[warp] = through_me;
    __syncthreads();
    float earlier_warps = 0.0f, chunk_total = 0.0f;
    for (int w = 0; w < kScanThreads / 32; ++w) {
      if (w == warp) earlier_warps = chunk_total;
      chunk_total += warp_totals[w];
    }
    const float prefix = carry + (earlier_warps + before_me);
#pragma unroll
    for (int i = 0; i < kScanItems; ++i)
      if (first + i < n) y[first + i] = prefix + v[i];
    carry += chunk_total;
    __syncthreads();  // warp_totals is rewritten by the next chunk
  }
}
