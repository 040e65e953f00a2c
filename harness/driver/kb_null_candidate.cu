// The harness's own candidate, trusted: it does nothing. Timing it measures what the driver does around
// every timed call (poisoning and fingerprinting the outputs, clearing persisting L2, the L2 flush, the
// synchronisations), which no candidate's claimed times include; see `harness.evaluate` (claim allowance).
#include "kb_problem.h"

extern "C" int kb_forward(const KBTensor*, const KBTensor*, KBTensor*, cudaStream_t) { return 0; }
