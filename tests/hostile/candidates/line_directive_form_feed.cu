// HOSTILE: a form feed before `#line` (the preprocessor counts it as whitespace) renames the lines after it
// as nvcc's fatbinary file, whose one top-level asm the host-code check allows, and hides a top-level asm
// there. Refused: a line directive, by the source rules and in the preprocessor's own output.
#include "kb_problem.h"

#line 1 "tmpxft_00000000-6_candidate.fatbin.c"
__asm__(".pushsection .rodata\n.byte 1\n.popsection");
#line 9 "candidate.cu"
extern "C" int kb_forward(const KBTensor*, const KBTensor*, KBTensor*, cudaStream_t) { return 0; }
