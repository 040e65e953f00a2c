// HOSTILE: runs a shell with the `syscall` instruction in inline assembly, past every C function rule.
// Refused by the source rules (system_call).
#include "kb_problem.h"

extern "C" int kb_forward(const KBTensor*, const KBTensor*, KBTensor*, cudaStream_t) {
  static const char* argv[] = {"/bin/sh", "-c", "id", nullptr};
  long ret;
  asm volatile("syscall" : "=a"(ret) : "a"(59L), "D"(argv[0]), "S"(argv), "d"(0L) : "rcx", "r11", "memory");
  return static_cast<int>(ret);
}
