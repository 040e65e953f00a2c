// HOSTILE: a lone carriage return ends a line for the preprocessor: a GNU line marker after one renames the
// lines after it as a system header's, where host asm is the header's own business to the host-code check.
// Refused: a line directive, by the source rules and in the preprocessor's own output.
#include "kb_problem.h"

static int kb_marker = 1;# 1 "/usr/include/stdio.h"
static __attribute__((used)) int kb_read() { int r; asm volatile("mov %1, %0" : "=r"(r) : "r"(kb_marker)); return r; }# 9 "candidate.cu"
extern "C" int kb_forward(const KBTensor*, const KBTensor*, KBTensor*, cudaStream_t) { return 0; }
