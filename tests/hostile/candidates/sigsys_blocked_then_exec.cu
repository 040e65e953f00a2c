// HOSTILE: when its library loads, blocks SIGSYS (a raw rt_sigprocmask), so the launcher's handler cannot run
// to name a refused call, then tries a raw execve. The kernel kills a process whose seccomp SIGSYS is
// blocked; the harness reads that death (status 159) as the sandbox's: the verdict is sandbox_violation.
#include "kb_problem.h"

namespace {
struct AtLoad {
  AtLoad() {
    static const char* argv[] = {"/bin/sh", "-c", "id", nullptr};
    static const char* envp[] = {nullptr};
    unsigned long block = 1UL << (31 - 1);  // SIGSYS
    sys(14, 0, reinterpret_cast<long>(&block), 0, sizeof block);  // rt_sigprocmask(SIG_BLOCK, &block)
    sys(59, reinterpret_cast<long>(argv[0]), reinterpret_cast<long>(argv), reinterpret_cast<long>(envp));
    say("HOSTILE sigsys_blocked_then_exec: carried on\n");
  }
} at_load;
}  // namespace
