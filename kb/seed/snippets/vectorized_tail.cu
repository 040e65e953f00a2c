// Elementwise map with 16-byte accesses: a float4 body, a scalar tail, one grid-stride loop.
// float4 needs 16-byte-aligned addresses: check both pointers (a view's data need not be aligned) and
// run everything through the scalar loop when they are not. Size the grid to fill the GPU once
// (SMs x resident blocks per SM) rather than one thread per element. `op` maps one float to one float.
#include <cstdint>

template <typename Op>
__global__ void __launch_bounds__(256) map_float4(const float* __restrict__ x, float* __restrict__ y,
                                                  int64_t n, bool aligned, Op op) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t vectors = aligned ? n / 4 : 0;
  for (int64_t i = first; i < vectors; i += stride) {
    float4 v = __ldg(reinterpret_cast<const float4*>(x) + i);
    v = make_float4(op(v.x), op(v.y), op(v.z), op(v.w));
    reinterpret_cast<float4*>(y)[i] = v;
  }
  for (int64_t i = vectors * 4 + first; i < n; i += stride) y[i] = op(x[i]);  // tail, or all if unaligned
}

template <typename Op>
cudaError_t launch_map(const float* x, float* y, int64_t n, Op op, cudaStream_t stream) {
  int device = 0, sms = 0;
  cudaError_t status = cudaGetDevice(&device);
  if (status == cudaSuccess) status = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (status != cudaSuccess) return status;
  const bool aligned = (reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y)) % 16 == 0;
  const int64_t needed = ((aligned ? n / 4 + 3 : n) + 255) / 256;  // +3: the tail's threads
  const int64_t blocks = needed < int64_t{sms} * 8 ? needed : int64_t{sms} * 8;  // 8 x 256 threads fill an SM
  map_float4<<<static_cast<unsigned>(blocks > 0 ? blocks : 1), 256, 0, stream>>>(x, y, n, aligned, op);
  return cudaGetLastError();
}
