// HOSTILE: redefines __glibcxx_assert, which libstdc++ expands inside its inline functions (std::vector's
// operator[]), as an asm statement, then includes <vector>: the asm sits on the header's line, which the
// check of the candidate's own lines skips and whose marked block in the assembly names a trusted header (the
// bytes here are harmless nops; any instruction would do). Refused: no header a candidate may include has
// host asm of its own, so assembly text on any header's line is the candidate's.
#include "kb_problem.h"

#undef __glibcxx_assert
#define __glibcxx_assert(cond) asm volatile(".byte 0x90, 0x90")
#include <vector>

extern "C" int kb_forward(const KBTensor* inputs, const KBTensor*, KBTensor* outputs, cudaStream_t stream) {
  std::vector<int> sizes(4);
  return sizes[1] != 0 ? 1 : launch_swish(inputs, outputs, stream);
}
