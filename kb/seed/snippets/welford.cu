// Mean and variance in one pass, numerically stable: Welford's update per element, Chan's merge of
// (count, mean, m2) across threads, warps and blocks. E[x^2] - E[x]^2 in fp32 loses every digit once
// |mean| >> std (inputs scaled by 1e3, a shifted channel); this does not. For layer, batch, group and
// instance norm: variance = m2 / count (biased, as the norms use); normalise with 1 / sqrtf(var + eps).
// The count is a float: exact up to 2^24 elements per statistic (use double counts beyond).
struct Welford {
  float count = 0.0f;
  float mean = 0.0f;
  float m2 = 0.0f;  // sum of squared deviations from the mean
};

__device__ __forceinline__ Welford welford_push(Welford w, float x) {
  w.count += 1.0f;
  const float delta = x - w.mean;
  w.mean += delta / w.count;
  w.m2 += delta * (x - w.mean);
  return w;
}

__device__ __forceinline__ Welford welford_merge(Welford a, Welford b) {
  const float count = a.count + b.count;
  if (b.count == 0.0f) return a;
  if (a.count == 0.0f) return b;
  const float delta = b.mean - a.mean;
  const float b_share = b.count / count;
  return {count, a.mean + delta * b_share, a.m2 + b.m2 + delta * delta * a.count * b_share};
}

// Every thread of the block gets the merged statistics. `partial`: kThreads / 32 Welford in shared memory.
template <int kThreads>
__device__ Welford block_welford(Welford w, Welford* partial) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    const Welford other{__shfl_xor_sync(0xffffffffu, w.count, offset), __shfl_xor_sync(0xffffffffu, w.mean, offset),
                        __shfl_xor_sync(0xffffffffu, w.m2, offset)};
    w = welford_merge(w, other);
  }
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = w;
  __syncthreads();
  Welford total = partial[0];
#pragma unroll
  for (int i = 1; i < kThreads / 32; ++i) total = welford_merge(total, partial[i]);
  return total;
}
