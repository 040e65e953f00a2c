// HOSTILE: assembles an `.incbin` directive by token pasting and stringisation, so the word never appears in
// the source, and embeds a file with it (a header beside it, which the compile sandbox lets it read).
// Refused: host code may not contain inline assembly, however the string was made.
#include "kb_problem.h"

#define PASTE(a, b) a##b
#define STRING(x) #x
#define EXPAND_STRING(x) STRING(x)
#define DIRECTIVE EXPAND_STRING(PASTE(.inc, bin))

__asm__(".pushsection .rodata\n.globl kb_embedded\nkb_embedded:\n" DIRECTIVE " \"kb_problem.h\"\n.byte 0\n.popsection");
extern "C" const char kb_embedded[];

extern "C" int kb_forward(const KBTensor* inputs, const KBTensor*, KBTensor* outputs, cudaStream_t stream) {
  return kb_embedded[0] == 0 ? 1 : launch_swish(inputs, outputs, stream);
}
