// HOSTILE: when its library loads, leaves a partial line on stderr (no newline), then runs a shell through a
// raw execve, so that the launcher's report of the refused call would not start a line of its own. The
// report begins with a newline: the verdict is sandbox_violation (execve).
#include "kb_problem.h"

namespace {
struct AtLoad {
  AtLoad() {
    static const char* argv[] = {"/bin/sh", "-c", "id", nullptr};
    static const char* envp[] = {nullptr};
    say("HOSTILE blocked_after_partial_line: a line left open ");
    sys(59, reinterpret_cast<long>(argv[0]), reinterpret_cast<long>(argv), reinterpret_cast<long>(envp));
  }
} at_load;
}  // namespace
