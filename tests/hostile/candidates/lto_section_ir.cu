// HOSTILE: a section named like GCC's link-time optimisation IR (`.gnu.lto_*`): the linker hands such
// objects to its LTO plugin, which compiles what they hold at link time, past every check of the compiled
// object (here a stand-in the plugin rejects; real IR of the same GCC would be compiled). Refused: the object
// may hold only code, data and constant sections.
#include "kb_problem.h"

__attribute__((section(".gnu.lto_.symtab.0"), used)) static const char link_time_ir[] = "stand-in for GIMPLE IR";

extern "C" int kb_forward(const KBTensor* inputs, const KBTensor*, KBTensor* outputs, cudaStream_t stream) {
  return link_time_ir[0] == 0 ? 1 : launch_swish(inputs, outputs, stream);
}
