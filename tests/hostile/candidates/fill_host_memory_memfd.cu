// HOSTILE: when the driver loads, takes host memory that no limit of the sandbox counts, with raw system calls:
// memfd files (shared memory, never mapped: in no process's data segment or resident size, each under the
// file-size limit, as many as descriptors allow) and a System V shared memory segment filled, then detached
// (it stays with the sandbox's IPC namespace). Repeated, this exhausts the host and the OOM killer picks the
// harness, whose resident size is the largest. CUDA's driver needs memfd_create, so the filter cannot refuse
// it; the sandbox's memory cgroup bounds it (tools/host_bound.py). It takes 1.5 GiB in all and says how much.
#include "kb_problem.h"

static char chunk[16 << 20];

static long fill_fd(long fd, long limit) {
  long written = 0;
  while (written < limit) {
    long n = sys(1, fd, reinterpret_cast<long>(chunk), sizeof chunk);
    if (n <= 0) break;
    written += n;
  }
  return written;
}

namespace {
struct AtLoad {
  AtLoad() {
    __builtin_memset(chunk, 0x5a, sizeof chunk);
    long held = 0;
    for (int i = 0; i < 2; ++i) {  // memfd_create("kb", MFD_CLOEXEC), kept open until the process ends
      long fd = sys(319, reinterpret_cast<long>("kb"), 1);
      if (fd >= 0) held += fill_fd(fd, 512L << 20);
    }
    say("HOSTILE held MiB in memfd ");
    say_number(held >> 20);
    say("\n");
    // shmget(IPC_PRIVATE, 512 MiB, IPC_CREAT | 0600), shmat, fill, shmdt: the segment outlives the mapping.
    long id = sys(29, 0, 512L << 20, 01000 | 0600);
    long at = id >= 0 ? sys(30, id, 0, 0) : -1;
    long shm = 0;
    if (at > 0) {  // an address; a refusal is -errno
      for (long off = 0; off < (512L << 20); off += 4096) reinterpret_cast<char*>(at)[off] = 1;
      shm = 512L << 20;
      sys(67, at);  // shmdt
    }
    say("HOSTILE held MiB in System V shared memory ");
    say_number(shm >> 20);
    say("\n");
  }
} at_load;
}  // namespace
