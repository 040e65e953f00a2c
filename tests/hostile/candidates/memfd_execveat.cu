// HOSTILE: when the driver loads, writes a script into an anonymous memory file (memfd) and runs it with
// execveat, a second program that no file on disk holds. The filter stops it: sandbox_violation (execveat).
#include "kb_problem.h"

namespace {
struct AtLoad {
  AtLoad() {
    static const char script[] = "#!/bin/sh\ntouch /tmp/kernelblaster-hostile-memfd\n";
    long fd = sys(319, reinterpret_cast<long>("kb"), 0);  // memfd_create
    sys(1, fd, reinterpret_cast<long>(script), sizeof script - 1);
    static const char* argv[] = {"kb", nullptr};
    static const char* envp[] = {nullptr};
    sys(322, fd, reinterpret_cast<long>(""), reinterpret_cast<long>(argv), reinterpret_cast<long>(envp),
        0x1000);  // execveat(fd, "", argv, envp, AT_EMPTY_PATH)
    say("HOSTILE memfd_execveat: execveat returned\n");
  }
} at_load;
}  // namespace
