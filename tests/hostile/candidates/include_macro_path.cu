// HOSTILE: includes a host file named through a macro, which a rule matching `#include "..."` misses.
// Refused by the source rules (include_path).
#include "kb_problem.h"
#define HOST_FILE "/etc/hostname"
#include HOST_FILE

extern "C" int kb_forward(const KBTensor*, const KBTensor*, KBTensor*, cudaStream_t) { return 0; }
