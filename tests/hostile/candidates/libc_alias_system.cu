// HOSTILE: calls system() under glibc's internal alias __libc_system, which a list of C names misses.
// Refused by the source rules (process).
#include "kb_problem.h"

extern "C" int __libc_system(const char* command);

extern "C" int kb_forward(const KBTensor*, const KBTensor*, KBTensor*, cudaStream_t) {
  return __libc_system("id");
}
