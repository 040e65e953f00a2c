// HOSTILE: when the driver loads, starts a second process (fork) through a raw system call; the child would
// outlive the driver. The launcher's filter stops it: the verdict is sandbox_violation (fork).
#include "kb_problem.h"

namespace {
struct AtLoad {
  AtLoad() {
    if (sys(57) == 0) sys(60, 0);  // the child would exit at once
    say("HOSTILE fork_raw_syscall: fork returned\n");
  }
} at_load;
}  // namespace
