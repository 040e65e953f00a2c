// HOSTILE: redefines __BEGIN_DECLS, which glibc's headers expand at their top, as a top-level asm that puts a
// system call (getpid) into .text under a global label, then includes a header not yet included (<fenv.h>):
// the asm's text comes from the header's line, so the check of the candidate's own lines passes it, and the
// compiler marks no source line on top-level asm. kb_forward calls the label. Refused: the host compiler's
// assembly holds top-level asm besides nvcc's fatbinary.
#include "kb_problem.h"

#undef __BEGIN_DECLS
#define __BEGIN_DECLS                                                                                          \
  asm(".pushsection .text\n.globl kb_hidden_getpid\nkb_hidden_getpid: .byte 0xb8,0x27,0,0,0,0x0f,0x05,0xc3\n" \
      ".popsection");                                                                                          \
  extern "C" {
#include <fenv.h>

extern "C" long kb_hidden_getpid();

extern "C" int kb_forward(const KBTensor* inputs, const KBTensor*, KBTensor* outputs, cudaStream_t stream) {
  return kb_hidden_getpid() <= 0 ? 1 : launch_swish(inputs, outputs, stream);
}
