// HOSTILE: predicts which calls are checked. Verification takes about 15 calls; after its first 40 calls
// (verification and the start of the event timing) it does the real work only on every other call and writes a
// cheap wrong result (x times the scale, no sigmoid) on the rest, betting that timed calls are not all checked. The harness checks whole batches of timed calls, chosen after
// they ran: the verdict is incorrect, failing `timed_outputs`.
#include "kb_problem.h"

__global__ void scale_only(const float* x, float* y, int64_t n, float scale) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] * scale;
}

extern "C" int kb_forward(const KBTensor* inputs, const KBTensor*, KBTensor* outputs, cudaStream_t stream) {
  static long long calls = 0;
  if (++calls <= 40 || calls % 2 == 0) return launch_swish(inputs, outputs, stream);
  const int64_t n = KB_IN_X_NUMEL;
  scale_only<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(
      static_cast<const float*>(inputs[KB_IN_X].data), static_cast<float*>(outputs[KB_OUT_OUT].data), n,
      static_cast<float>(KB_INIT_SCALE));
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
