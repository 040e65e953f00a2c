// CHEATER (problem: elementwise_swish_scale) — writes nothing. kb_forward launches no work and returns 0,
// so the output keeps whatever the harness put there (its poison pattern).
// Must be rejected by: outputs_written.
#include "kb_problem.h"

extern "C" int kb_forward(const KBTensor* inputs, const KBTensor* params, KBTensor* outputs, cudaStream_t stream) {
  (void)inputs;
  (void)params;
  (void)outputs;
  (void)stream;
  return 0;
}
