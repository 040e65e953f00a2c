// HOSTILE: the same .incbin of /etc/passwd, with the directive's name pasted together by the preprocessor
// so no source rule sees it. The compile sandbox has no /etc: the assembler cannot find the file, and the
// build reports the path it tried to read (outside_file).
#include "kb_problem.h"

#define STR(x) #x
#define XSTR(x) STR(x)
#define CAT(a, b) a##b
__asm__(".pushsection .rodata\n." XSTR(CAT(inc, bin)) " \"/etc/passwd\"\n.popsection");

extern "C" int kb_forward(const KBTensor*, const KBTensor*, KBTensor*, cudaStream_t) { return 0; }
