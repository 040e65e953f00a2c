// HOSTILE: when the driver loads, runs a shell (execve) through a raw system call, past every source and
// symbol rule. The launcher's system-call filter stops it: the verdict is sandbox_violation (execve).
#include "kb_problem.h"

namespace {
struct AtLoad {
  AtLoad() {
    static const char* argv[] = {"/bin/sh", "-c", "touch /tmp/kernelblaster-hostile-exec", nullptr};
    static const char* envp[] = {nullptr};
    sys(59, reinterpret_cast<long>(argv[0]), reinterpret_cast<long>(argv), reinterpret_cast<long>(envp));
    say("HOSTILE exec_raw_syscall: execve returned\n");
  }
} at_load;
}  // namespace
