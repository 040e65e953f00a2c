// The harness's own candidate, trusted: it computes nothing. Timing it measures what the driver does around
// every timed call (poisoning and fingerprinting the outputs, clearing persisting L2, the L2 flush, the
// synchronisations), which no candidate's claimed times include; see `harness.evaluate` (claim allowance).
// Its one empty kernel makes the GPU switch to its process's context and back, as a real candidate's calls
// do, so the batches clocked on it beside a candidate's carry the same switches (`harness.timing`).
#include "kb_problem.h"

__global__ void kb_null_kernel() {}

extern "C" int kb_forward(const KBTensor*, const KBTensor*, KBTensor*, cudaStream_t stream) {
  kb_null_kernel<<<1, 1, 0, stream>>>();
  return 0;
}
