// HONEST: a toolkit header's own host asm (libcu++'s spin-wait pause, through its own macro) is not the
// candidate's: it must build.
#include <cuda/std/atomic>
#include "kb_problem.h"

__global__ void swish(const float* x, float* y, int64_t n, float scale) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = (x[i] * (1.0f / (1.0f + expf(-x[i])))) * scale;
}

static int launch_swish(const KBTensor* inputs, KBTensor* outputs, cudaStream_t stream) {
  const int64_t n = KB_IN_X_NUMEL;
  swish<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(static_cast<const float*>(inputs[KB_IN_X].data),
                                                                    static_cast<float*>(outputs[KB_OUT_OUT].data), n,
                                                                    static_cast<float>(KB_INIT_SCALE));
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
extern "C" int kb_forward(const KBTensor* inputs, const KBTensor*, KBTensor* outputs, cudaStream_t stream) {
  cuda::std::__cccl_thread_yield_processor();
  return launch_swish(inputs, outputs, stream);
}
