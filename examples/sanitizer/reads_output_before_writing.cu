// SANITIZER CASE (problem: elementwise_swish_scale) — correct output, but every thread first reads the
// output element it is about to write (a "read-modify-write" habit whose old value decides nothing unless
// it holds a bit pattern no one stores). The harness fills outputs before each call, so the read returns
// something, the answer is right, and every verification check passes; but in the candidate's own process
// nothing ever wrote that memory, and compute-sanitizer's initcheck reports the uninitialized read.
// Must be: ok without --sanitize; sanitizer_error under --sanitize initcheck.
#include "kb_problem.h"

#include <cstdint>

static_assert(KB_IN_X_NUMEL == KB_OUT_OUT_NUMEL, "output has the input's shape");

constexpr int kThreads = 256;
constexpr unsigned kNeverStored = 0x7fbadbadu;  // a NaN payload nothing writes

__global__ void swish_scale_read_first(const float* __restrict__ x, float* __restrict__ y, int64_t n, float scale) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) {
    const float before = y[i];  // the output has not been written by this call yet
    const float v = x[i];
    const float sigmoid = 1.0f / (1.0f + expf(-v));
    y[i] = __float_as_uint(before) == kNeverStored ? 0.0f : (v * sigmoid) * scale;
  }
}

extern "C" int kb_forward(const KBTensor* inputs, const KBTensor* params, KBTensor* outputs, cudaStream_t stream) {
  (void)params;
  const float* x = static_cast<const float*>(inputs[KB_IN_X].data);
  float* y = static_cast<float*>(outputs[KB_OUT_OUT].data);
  const int64_t n = KB_IN_X_NUMEL;
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  swish_scale_read_first<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(x, y, n,
                                                                                  static_cast<float>(KB_INIT_SCALE));
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
