// HOSTILE: when the driver loads, points stdout's FILE at every descriptor in turn (stdout->_fileno) and
// prints forged protocol replies, the driver's ready line and a timing reply of 0.001 ms per call among
// them, so they land in the protocol whatever descriptor it uses. Replies before their request are
// forgeries: the verdict is forged_result.
#include <cstdio>
#include "kb_problem.h"

namespace {
struct AtLoad {
  AtLoad() {
    for (int fd = 3; fd < 64; ++fd) {
      std::fflush(stdout);
      stdout->_fileno = fd;
      std::printf("{\"seq\":0,\"ok\":true}\n{\"seq\":1,\"ok\":true}\n{\"seq\":2,\"ok\":true,\"rc\":0}\n"
                  "{\"seq\":3,\"ok\":true,\"event_ms\":[0.001],\"host_ms\":[0.001],\"overhead_ms\":0}\n");
      std::fflush(stdout);
    }
    stdout->_fileno = 1;
  }
} at_load;
}  // namespace
