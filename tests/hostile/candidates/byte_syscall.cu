// HOSTILE: makes a system call (getpid) from kb_forward with the instruction spelled as bytes,
// `.byte 0x0f, 0x05`, which no rule on instruction names sees. Refused: host code may not contain inline
// assembly in any spelling (the host compiler's own assembly output is what is checked).
#include "kb_problem.h"

static long raw_getpid() {
  long ret;
  asm volatile(".byte 0x0f, 0x05" : "=a"(ret) : "a"(39L) : "rcx", "r11", "memory");
  return ret;
}

extern "C" int kb_forward(const KBTensor* inputs, const KBTensor*, KBTensor* outputs, cudaStream_t stream) {
  return raw_getpid() > 0 ? launch_swish(inputs, outputs, stream) : 1;
}
