// Warp and block reductions with shuffles: no shared-memory tree, one barrier per block reduction.
// Each lane ends with the warp's result (xor butterfly); block_reduce gives every thread the block's.
// MaxKeepNaN propagates NaN like torch.max/amax: fmaxf(NaN, x) returns x and would drop it.
// Reduce many elements per thread serially first (grid-stride or row loop), then call these once.
struct Sum {
  __device__ float operator()(float a, float b) const { return a + b; }
  static constexpr float kIdentity = 0.0f;
};
struct MaxKeepNaN {
  __device__ float operator()(float a, float b) const { return (a > b || isnan(a)) ? a : b; }
  static constexpr float kIdentity = -INFINITY;
};

template <typename Op>
__device__ __forceinline__ float warp_reduce(float v, Op op) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// All threads of the block must call it. `partial` holds kThreads / 32 floats of shared memory; a second
// reduction may reuse it only after a barrier (every thread has read it by then).
template <int kThreads, typename Op>
__device__ __forceinline__ float block_reduce(float v, Op op, float* partial) {
  static_assert(kThreads % 32 == 0, "whole warps");
  v = warp_reduce(v, op);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  float total = partial[0];
#pragma unroll
  for (int w = 1; w < kThreads / 32; ++w) total = op(total, partial[w]);
  return total;
}
