// Online softmax statistics: one pass keeps a running max m and sum s of exp(x - m), rescaling s when m
// grows, so a row is read once for its statistics and once to write exp(x - m) / s (flash attention keeps
// the same pair per query row). States merge across lanes and warps in any order. Special values match
// PyTorch: a NaN or +inf in the row makes the whole row NaN, a -inf gives 0, an all -inf row gives NaN.
struct MaxSum {
  float max = -INFINITY;
  float sum = 0.0f;
};

// exp(x - m), where x = -inf counts as exp(-inf) = 0 even when m is -inf too (exp(NaN) otherwise).
__device__ __forceinline__ float exp_below(float x, float m) { return x == -INFINITY ? 0.0f : expf(x - m); }

__device__ __forceinline__ MaxSum online_merge(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.max, b.max);  // a NaN input still poisons the sum below through exp(NaN - m)
  return {m, a.sum * exp_below(a.max, m) + b.sum * exp_below(b.max, m)};
}

__device__ __forceinline__ MaxSum online_push(MaxSum state, float x) { return online_merge(state, {x, 1.0f}); }

// Every thread of the block gets the row's (max, sum). `partial` holds kThreads / 32 MaxSum in shared memory.
template <int kThreads>
__device__ MaxSum block_online(MaxSum state, MaxSum* partial) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    const float other_max = __shfl_xor_sync(0xffffffffu, state.max, offset);
    state = online_merge(state, {other_max, __shfl_xor_sync(0xffffffffu, state.sum, offset)});
  }
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = state;
  __syncthreads();
  MaxSum row = partial[0];
#pragma unroll
  for (int w = 1; w < kThreads / 32; ++w) row = online_merge(row, partial[w]);
  return row;
}
