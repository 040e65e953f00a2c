// HOSTILE: on its first call, kb_forward writes into the protocol's pipe (the FIFO among its descriptors) a
// reply nested 100000 objects deep, so that a harness parsing it with a recursive JSON parser overflows its
// stack and blames itself (harness_error). Replies are bounded before they are parsed: forged_result.
#include "kb_problem.h"

constexpr int kDepth = 100000;
static char g_line[32 + 6 * kDepth + kDepth + 8];

static void write_nested_reply() {
  char* at = g_line;
  const char head[] = "{\"seq\":1,\"ok\":true,\"rc\":";
  __builtin_memcpy(at, head, sizeof head - 1);
  at += sizeof head - 1;
  for (int i = 0; i < kDepth; ++i, at += 5) __builtin_memcpy(at, "{\"a\":", 5);
  *at++ = '0';
  for (int i = 0; i <= kDepth; ++i) *at++ = '}';
  *at++ = '\n';
  for (long fd = 3; fd < 64; ++fd) {
    static char info[144];  // struct stat
    if (sys(5, fd, reinterpret_cast<long>(info)) != 0) continue;  // fstat
    const unsigned mode = *reinterpret_cast<unsigned*>(info + 24);  // st_mode
    if ((mode & 0170000) == 0010000) sys(1, fd, reinterpret_cast<long>(g_line), at - g_line);  // a FIFO
  }
}

extern "C" int kb_forward(const KBTensor* inputs, const KBTensor*, KBTensor* outputs, cudaStream_t stream) {
  static bool forged = false;
  if (!forged) {
    forged = true;
    write_nested_reply();
  }
  return launch_swish(inputs, outputs, stream);
}
