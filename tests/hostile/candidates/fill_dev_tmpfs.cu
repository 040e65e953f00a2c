// HOSTILE: when the driver loads, fills the GPU sandbox's /dev (a tmpfs bwrap mounts with no size of its own:
// half the host's memory) and /dev/shm with files, each under the file-size limit, with raw system calls:
// tmpfs pages are no process's data segment and, never mapped, no process's memory, so filling them takes the
// host's memory past every limit of the driver and the OOM killer picks the harness. /dev must be read-only
// and /dev/shm a small tmpfs. It writes at most 640 MiB in all (enough to show the bound) and says how much.
#include "kb_problem.h"

static char chunk[16 << 20];

// Writes up to `limit` bytes into `path` (created), in chunks; returns how many went in.
static long fill(const char* path, long limit) {
  long fd = sys(257, -100, reinterpret_cast<long>(path), 01101, 0644);  // openat(O_WRONLY | O_CREAT | O_TRUNC)
  if (fd < 0) return -1;
  long written = 0;
  while (written < limit) {
    long n = sys(1, fd, reinterpret_cast<long>(chunk), sizeof chunk);
    if (n <= 0) break;
    written += n;
  }
  sys(3, fd);
  return written;
}

static void report(const char* path, long written) {
  say(written < 0 ? "HOSTILE could not create " : "HOSTILE filled ");
  say(path);
  if (written >= 0) {
    say(" with MiB ");
    say_number(written >> 20);
  }
  say("\n");
}

namespace {
struct AtLoad {
  AtLoad() {
    __builtin_memset(chunk, 0x5a, sizeof chunk);
    for (const char* path : {"/dev/kb-fill-0", "/dev/kb-fill-1"}) report(path, fill(path, 128L << 20));
    for (const char* path : {"/dev/shm/kb-fill-0", "/dev/shm/kb-fill-1", "/dev/shm/kb-fill-2"})
      report(path, fill(path, 128L << 20));
  }
} at_load;
}  // namespace
