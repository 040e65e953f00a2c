// HOSTILE: a GNU line marker after an empty macro: no directive to the C preprocessor, which passes the line
// on, but cudafe++ reads that output again and obeys it, so the lines after it are named after a fatbinary
// file, where the host-code check once allowed top-level asm. Refused: a directive left for cudafe++, and asm
// in a file that is not nvcc's own fatbinary.
#include "kb_problem.h"

#define KB_EMPTY
KB_EMPTY # 1 "/usr/include/kb.fatbin.c"
__asm__(".pushsection .rodata\n.byte 1\n.popsection");
KB_EMPTY # 11 "candidate.cu"
extern "C" int kb_forward(const KBTensor*, const KBTensor*, KBTensor*, cudaStream_t) { return 0; }
