// HOSTILE: a wrong swish (its scale off by half) whose first call also takes all free GPU memory and keeps it,
// so that the harness's own comparisons run out of memory and the harness blames itself (harness_error).
// The memory the harness compares with is set aside before the candidate runs: incorrect.
#include "kb_problem.h"

static void hoard_all_free_memory() {
  void* taken = nullptr;
  for (size_t chunk = size_t{1} << 30; chunk >= (size_t{2} << 20); chunk /= 2) {
    while (cudaMalloc(&taken, chunk) == cudaSuccess) {
    }
  }
  cudaGetLastError();  // the last failed allocation is not a kernel's error
}

extern "C" int kb_forward(const KBTensor* inputs, const KBTensor*, KBTensor* outputs, cudaStream_t stream) {
  static bool hoarded = false;
  if (!hoarded) {
    hoarded = true;
    hoard_all_free_memory();
  }
  const int64_t n = KB_IN_X_NUMEL;
  swish<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(static_cast<const float*>(inputs[KB_IN_X].data),
                                                                  static_cast<float*>(outputs[KB_OUT_OUT].data), n,
                                                                  1.5f * static_cast<float>(KB_INIT_SCALE));
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
