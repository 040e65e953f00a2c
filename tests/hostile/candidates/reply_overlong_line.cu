// HOSTILE: on its first call, kb_forward writes 8 MiB without a newline into the protocol's pipe (the FIFO
// among its descriptors), so that a harness that reads a reply line without a bound holds all of it. Reply
// lines are bounded: forged_result.
#include "kb_problem.h"

static char g_junk[8 << 20];

extern "C" int kb_forward(const KBTensor* inputs, const KBTensor*, KBTensor* outputs, cudaStream_t stream) {
  static bool forged = false;
  if (!forged) {
    forged = true;
    __builtin_memset(g_junk, '{', sizeof g_junk);
    for (long fd = 3; fd < 64; ++fd) {
      static char info[144];  // struct stat
      if (sys(5, fd, reinterpret_cast<long>(info)) != 0) continue;  // fstat
      const unsigned mode = *reinterpret_cast<unsigned*>(info + 24);  // st_mode
      if ((mode & 0170000) == 0010000) sys(1, fd, reinterpret_cast<long>(g_junk), sizeof g_junk);  // a FIFO
    }
  }
  return launch_swish(inputs, outputs, stream);
}
