// SANITIZER CASE (problem: elementwise_swish_scale) — correct output, but the last thread of every block
// also reads one float past the end of a 1 KiB table the candidate allocated (a "lookahead" load whose
// value decides nothing unless it holds a bit pattern no one stores). The read lands in memory that the
// allocator's rounding leaves mapped, so nothing crashes and every verification check passes;
// compute-sanitizer's memcheck reports the invalid read.
// Must be: ok without --sanitize; sanitizer_error under --sanitize memcheck.
#include "kb_problem.h"

#include <cstdint>

static_assert(KB_IN_X_NUMEL == KB_OUT_OUT_NUMEL, "output has the input's shape");

constexpr int kThreads = 256;
constexpr unsigned kNeverStored = 0x7fbadbadu;  // a NaN payload nothing writes

__global__ void swish_scale_lookahead(const float* __restrict__ x, float* __restrict__ y,
                                      const float* __restrict__ table, int64_t n, float scale) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const float next = table[threadIdx.x + 1];  // thread kThreads - 1 reads table[kThreads]: out of bounds
  if (i < n) {
    const float v = x[i];
    const float sigmoid = 1.0f / (1.0f + expf(-v));
    y[i] = __float_as_uint(next) == kNeverStored ? 0.0f : (v * sigmoid) * scale;
  }
}

extern "C" int kb_forward(const KBTensor* inputs, const KBTensor* params, KBTensor* outputs, cudaStream_t stream) {
  (void)params;
  static float* table = nullptr;  // kThreads floats, allocated on the first call and kept
  if (table == nullptr) {
    if (cudaMalloc(&table, kThreads * sizeof(float)) != cudaSuccess) return 1;
    if (cudaMemset(table, 0, kThreads * sizeof(float)) != cudaSuccess) return 1;
  }
  const float* x = static_cast<const float*>(inputs[KB_IN_X].data);
  float* y = static_cast<float*>(outputs[KB_OUT_OUT].data);
  const int64_t n = KB_IN_X_NUMEL;
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  swish_scale_lookahead<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      x, y, table, n, static_cast<float>(KB_INIT_SCALE));
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
