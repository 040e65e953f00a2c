// HOSTILE: on its first call, kb_forward finds the protocol's pipe (fstat on every descriptor) and writes
// canned "ok" replies into it, ahead of the driver's own. Replies numbered for the wrong request, or a
// second reply to one request, are forgeries: the verdict is forged_result.
#include <sys/stat.h>
#include <cstdio>
#include "kb_problem.h"

static void forge_replies() {
  for (int fd = 3; fd < 64; ++fd) {
    struct stat info;
    if (fstat(fd, &info) != 0 || !S_ISFIFO(info.st_mode)) continue;
    std::fflush(stdout);
    stdout->_fileno = fd;
    for (int seq = 1; seq < 40; ++seq) std::printf("{\"seq\":%d,\"ok\":true,\"rc\":0}\n", seq);
    std::fflush(stdout);
    stdout->_fileno = 1;
  }
}

extern "C" int kb_forward(const KBTensor* inputs, const KBTensor*, KBTensor* outputs, cudaStream_t stream) {
  static bool forged = false;
  if (!forged) {
    forged = true;
    forge_replies();
  }
  return launch_swish(inputs, outputs, stream);
}
