// HOSTILE: reaches CuTe through `./`, which a rule matching `cute/...` misses, in a run that does not allow
// CUTLASS. Refused by the source rules (library:cutlass).
#include "kb_problem.h"
#include <./cute/tensor.hpp>

extern "C" int kb_forward(const KBTensor*, const KBTensor*, KBTensor*, cudaStream_t) { return 0; }
