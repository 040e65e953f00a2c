// HOSTILE: when the driver loads, creates files in the host's /tmp and /var/tmp, in a folder the test made,
// and next to its own build (found in /proc/self/maps), with raw system calls. The sandbox's /tmp is
// private and its build folder read-only: no host file is written.
#include "kb_problem.h"

static void plant(const char* path) {
  long fd = sys(257, -100, reinterpret_cast<long>(path), 0101, 0644);  // openat(.., O_WRONLY | O_CREAT)
  say(fd >= 0 ? "HOSTILE wrote " : "HOSTILE could not write ");
  say(path);
  say("\n");
  if (fd >= 0) sys(1, fd, reinterpret_cast<long>("owned\n"), 6);
}

static void plant_beside_own_build() {
  static char maps[1 << 16];
  long fd = sys(257, -100, reinterpret_cast<long>("/proc/self/maps"), 0);
  long size = fd >= 0 ? sys(0, fd, reinterpret_cast<long>(maps), sizeof maps - 1) : 0;
  maps[size > 0 ? size : 0] = 0;
  char* found = __builtin_strstr(maps, "/candidate.so");
  if (found == nullptr) return;
  char* start = found;
  while (start > maps && start[-1] != ' ') --start;
  static char path[4096];
  long length = found - start;
  __builtin_memcpy(path, start, length);
  __builtin_memcpy(path + length, "/pwned", 7);
  plant(path);
}

namespace {
struct AtLoad {
  AtLoad() {
    for (const char* path : {"/tmp/kernelblaster-hostile-written", "/var/tmp/kernelblaster-hostile-written",
                             "/tmp/kernelblaster-hostile-canary/owned"})
      plant(path);
    plant_beside_own_build();
  }
} at_load;
}  // namespace
