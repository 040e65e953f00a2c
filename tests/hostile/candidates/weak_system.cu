// HOSTILE: declares system() weak (resolved when the driver loads) and names it through a macro, so the
// source rules see no call and `nm` prints the reference as `w`, not `U`. Refused by the object's symbols
// (process).
#include "kb_problem.h"

#define JOIN(a, b) a##b
#define RUN JOIN(sys, tem)
extern "C" int RUN(const char* command) __attribute__((weak));

extern "C" int kb_forward(const KBTensor*, const KBTensor*, KBTensor*, cudaStream_t) {
  return RUN != nullptr ? RUN("id") : 0;
}
