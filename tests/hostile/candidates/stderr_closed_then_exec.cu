// HOSTILE: when its library loads, closes stderr (where the launcher reports a refused call), then runs a
// shell through a raw execve. The launcher reports on a private copy of stderr: the verdict is
// sandbox_violation (execve).
#include "kb_problem.h"

namespace {
struct AtLoad {
  AtLoad() {
    static const char* argv[] = {"/bin/sh", "-c", "id", nullptr};
    static const char* envp[] = {nullptr};
    sys(3, 2);  // close(2)
    sys(59, reinterpret_cast<long>(argv[0]), reinterpret_cast<long>(argv), reinterpret_cast<long>(envp));
  }
} at_load;
}  // namespace
