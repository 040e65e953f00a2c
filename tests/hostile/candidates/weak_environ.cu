// HOSTILE: reads the environment (API keys) through a weak `environ` named by a macro, printing it where
// the harness collects the driver's output. Refused by the object's symbols (environment).
#include <cstdio>
#include "kb_problem.h"

#define JOIN(a, b) a##b
extern "C" char** JOIN(envi, ron) __attribute__((weak));

extern "C" int kb_forward(const KBTensor*, const KBTensor*, KBTensor*, cudaStream_t) {
  for (char** entry = JOIN(envi, ron); entry != nullptr && *entry != nullptr; ++entry) std::printf("%s\n", *entry);
  return 0;
}
