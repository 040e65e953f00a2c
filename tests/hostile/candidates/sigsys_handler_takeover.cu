// HOSTILE: when its library loads, installs its own SIGSYS handler (a raw rt_sigaction), which would run
// instead of the launcher's on a refused call and let the candidate carry on unreported; then tries a raw
// execve. The filter refuses a new SIGSYS handler itself: the verdict is sandbox_violation (rt_sigaction).
#include "kb_problem.h"

struct KernelSigaction {
  void (*handler)(int);
  unsigned long flags;
  void (*restorer)();
  unsigned long mask;
};

static void ignore(int) {}

namespace {
struct AtLoad {
  AtLoad() {
    static const char* argv[] = {"/bin/sh", "-c", "id", nullptr};
    static const char* envp[] = {nullptr};
    KernelSigaction action = {ignore, 0, nullptr, 0};
    sys(13, 31, reinterpret_cast<long>(&action), 0, sizeof action.mask);  // rt_sigaction(SIGSYS, &action)
    sys(59, reinterpret_cast<long>(argv[0]), reinterpret_cast<long>(argv), reinterpret_cast<long>(envp));
    say("HOSTILE sigsys_handler_takeover: carried on\n");
  }
} at_load;
}  // namespace
