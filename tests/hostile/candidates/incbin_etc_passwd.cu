// HOSTILE: embeds the host's /etc/passwd in the object with the assembler's .incbin, to read it back at
// run time. Refused by the source rules (assembler_file).
#include "kb_problem.h"

__asm__(".pushsection .rodata\n.globl kb_stolen\nkb_stolen:\n.incbin \"/etc/passwd\"\n.byte 0\n.popsection");

extern "C" int kb_forward(const KBTensor*, const KBTensor*, KBTensor*, cudaStream_t) { return 0; }
