// HOSTILE: includes a host file, so its text lands in the compile log that goes back to the LLM.
// Refused by the source rules (outside_file).
#include "kb_problem.h"
#include "/etc/hostname"

extern "C" int kb_forward(const KBTensor*, const KBTensor*, KBTensor*, cudaStream_t) { return 0; }
