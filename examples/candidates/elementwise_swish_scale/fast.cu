// Fast candidate for elementwise_swish_scale: y = x * sigmoid(x) * scale in one pass.
// Why it is fast: the op is purely memory-bound (8 bytes moved per element), so the kernel reads x once
// and writes y once with 16-byte float4 accesses (a quarter of the memory instructions), in a grid-stride
// loop sized to fill every SM once (no tail wave of blocks). The last numel % 4 elements go through a
// scalar tail; misaligned pointers fall back to a scalar grid-stride kernel.
#include "kb_problem.h"

#include <cstdint>

static_assert(KB_IN_X_NUMEL == KB_OUT_OUT_NUMEL, "output has the input's shape");

constexpr int kThreads = 256;
constexpr int kBlocksPerSm = 2048 / kThreads;  // full occupancy on sm_90 (2048 resident threads per SM)

// PyTorch's order: sigmoid(x) = 1 / (1 + exp(-x)), then (x * sigmoid) * scale. IEEE division and expf
// (no fast-math), so NaN propagates and -inf gives -inf * 0 = NaN, exactly as in PyTorch.
__device__ __forceinline__ float swish_scale(float v, float scale) {
  return (v * (1.0f / (1.0f + expf(-v)))) * scale;
}

__global__ void __launch_bounds__(kThreads) swish_scale_vec4(const float* __restrict__ x, float* __restrict__ y,
                                                             int64_t n, float scale) {
  const int64_t start = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t n4 = n / 4;
  const float4* x4 = reinterpret_cast<const float4*>(x);
  float4* y4 = reinterpret_cast<float4*>(y);
  for (int64_t i = start; i < n4; i += stride) {
    float4 v = __ldg(x4 + i);
    v.x = swish_scale(v.x, scale);
    v.y = swish_scale(v.y, scale);
    v.z = swish_scale(v.z, scale);
    v.w = swish_scale(v.w, scale);
    y4[i] = v;
  }
  // Scalar tail: the last n % 4 (< 4) elements.
  for (int64_t i = n4 * 4 + start; i < n; i += stride) y[i] = swish_scale(x[i], scale);
}

__global__ void __launch_bounds__(kThreads) swish_scale_scalar(const float* __restrict__ x, float* __restrict__ y,
                                                               int64_t n, float scale) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = swish_scale(x[i], scale);
}

static bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

extern "C" int kb_forward(const KBTensor* inputs, const KBTensor* params, KBTensor* outputs, cudaStream_t stream) {
  (void)params;
  const float* x = static_cast<const float*>(inputs[KB_IN_X].data);
  float* y = static_cast<float*>(outputs[KB_OUT_OUT].data);
  const int64_t n = KB_IN_X_NUMEL;
  const float scale = static_cast<float>(KB_INIT_SCALE);

  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return 1;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) return 1;

  const bool vectorised = aligned16(x) && aligned16(y);
  const int64_t work_items = vectorised ? n / 4 + 1 : n;  // +1 covers the scalar tail
  const int64_t needed = (work_items + kThreads - 1) / kThreads;
  const int64_t resident = static_cast<int64_t>(sms) * kBlocksPerSm;
  const unsigned blocks = static_cast<unsigned>(needed < resident ? needed : resident);
  if (vectorised)
    swish_scale_vec4<<<blocks, kThreads, 0, stream>>>(x, y, n, scale);
  else
    swish_scale_scalar<<<blocks, kThreads, 0, stream>>>(x, y, n, scale);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
