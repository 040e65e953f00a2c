// KernelBlaster driver launcher: the trusted first code of every driver process.
//
//   kb_launcher [--no-filter] [--cpu-seconds N] [--file-bytes N] [--tasks N] [--data-bytes N]
//               DRIVER_LIBRARY CANDIDATE_LIBRARY
//
// The driver and the candidate are two shared libraries, two link units: the driver's (trusted, exporting
// kb_driver_main) and the candidate's (exporting kb_forward alone). Code in a library can run before any
// of its functions is called (constructors, IFUNC resolvers; the build refuses a candidate's, but the
// rules are not the boundary), so everything the candidate must not escape is set up here, before either
// library is loaded:
//   1. resource limits (CPU seconds, file size, tasks, data segment; no core files);
//   2. a seccomp filter, inherited by every thread, that stops starting processes (fork, vfork, clone
//      without CLONE_THREAD), running programs (execve, execveat), tracing or reading other processes,
//      the kernel keyring, BPF, io_uring, userfaultfd, mounts and namespaces, and module loading. Such a
//      call raises SIGSYS; the handler below names it on (a private copy of) stderr and ends the process
//      with status 159 (128 + SIGSYS, what a shell reports for a SIGSYS death), which the harness reports as
//      blocked. Replacing that handler is refused the same way; a candidate that blocks SIGSYS dies of it,
//      with the same status and no name;
//   3. the protocol channel: replies go to a private copy of stdout, and fd 1 becomes stderr, so what
//      the candidate prints never lands in the protocol by accident;
//   4. the OOM killer's first choice: oom_score_adj 1000. Memory the limits above do not count (pinned host
//      buffers, shared memory: memfd, System V segments) can still exhaust the host, and the OOM killer would
//      otherwise pick the process with the largest resident size, the harness's. A candidate can lower it
//      again to the harness's own value (an unprivileged process may go down to what it started with), so
//      this turns a hog's accident into the driver's death, not a hostile candidate's (that needs a memory
//      cgroup).
// Only then is the driver loaded (RTLD_NOW: all its symbols bound), then the candidate (RTLD_NOW |
// RTLD_LOCAL: nothing loaded before it can bind to it), and kb_driver_main(protocol_fd, kb_forward) called. Nothing after this point is
// trusted: a filter cannot be removed, and the launcher itself never needs execve, so the ban holds for
// the candidate without exceptions. With ncu, ncu starts this launcher and its own injection rides along.
// `--no-filter` skips the filter (`--unsafe-no-sandbox` runs).
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__)
#define KB_AUDIT_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define KB_AUDIT_ARCH AUDIT_ARCH_AARCH64
#else
#error "kb_launcher: the system-call filter is written for x86_64 and aarch64"
#endif

enum { kExitBlocked = 159, kExitLaunchFailed = 127, kExitUsage = 2 };

struct Blocked {
  int nr;
  const char* name;
  const char* attempt;  // completes "the candidate tried to ..."
};

static const struct Blocked kBlocked[] = {
    {__NR_execve, "execve", "run another program"},
    {__NR_execveat, "execveat", "run another program"},
#ifdef __NR_fork
    {__NR_fork, "fork", "start a process"},
#endif
#ifdef __NR_vfork
    {__NR_vfork, "vfork", "start a process"},
#endif
    {__NR_ptrace, "ptrace", "trace a process"},
    {__NR_process_vm_readv, "process_vm_readv", "read another process's memory"},
    {__NR_process_vm_writev, "process_vm_writev", "write another process's memory"},
    {__NR_pidfd_getfd, "pidfd_getfd", "take another process's files"},
    {__NR_kcmp, "kcmp", "inspect other processes"},
    {__NR_keyctl, "keyctl", "use the kernel keyring"},
    {__NR_add_key, "add_key", "use the kernel keyring"},
    {__NR_request_key, "request_key", "use the kernel keyring"},
    {__NR_bpf, "bpf", "load BPF programs"},
    {__NR_userfaultfd, "userfaultfd", "handle page faults"},
    {__NR_io_uring_setup, "io_uring_setup", "use io_uring"},
    {__NR_io_uring_enter, "io_uring_enter", "use io_uring"},
    {__NR_io_uring_register, "io_uring_register", "use io_uring"},
    {__NR_mount, "mount", "mount file systems"},
    {__NR_umount2, "umount2", "unmount file systems"},
    {__NR_pivot_root, "pivot_root", "change the root file system"},
    {__NR_chroot, "chroot", "change the root directory"},
    {__NR_unshare, "unshare", "create namespaces"},
    {__NR_setns, "setns", "enter namespaces"},
    {__NR_open_by_handle_at, "open_by_handle_at", "open files by handle"},
    {__NR_fsopen, "fsopen", "mount file systems"},
    {__NR_fsmount, "fsmount", "mount file systems"},
    {__NR_move_mount, "move_mount", "mount file systems"},
    {__NR_open_tree, "open_tree", "mount file systems"},
    {__NR_init_module, "init_module", "load kernel modules"},
    {__NR_finit_module, "finit_module", "load kernel modules"},
    {__NR_delete_module, "delete_module", "unload kernel modules"},
    {__NR_kexec_load, "kexec_load", "load a kernel"},
    {__NR_reboot, "reboot", "reboot"},
};
static const struct Blocked kCloneProcess = {__NR_clone, "clone", "start a process"};
// Replacing or ignoring the SIGSYS handler below would let a refused call pass unreported.
static const struct Blocked kTakeOverSigsys = {__NR_rt_sigaction, "rt_sigaction",
                                               "take over the handler that reports forbidden calls"};

// The handler reports on a private copy of stderr, so a candidate that closed or redirected fd 2 is still
// named.
static int g_report_fd = STDERR_FILENO;

static void write_text(const char* text) {
  size_t left = strlen(text);
  while (left > 0) {
    ssize_t n = write(g_report_fd, text, left);
    if (n <= 0) return;
    text += n;
    left -= (size_t)n;
  }
}

static const struct Blocked* blocked_call(int nr) {
  if (nr == kCloneProcess.nr) return &kCloneProcess;
  if (nr == kTakeOverSigsys.nr) return &kTakeOverSigsys;
  for (size_t i = 0; i < sizeof kBlocked / sizeof kBlocked[0]; ++i)
    if (kBlocked[i].nr == nr) return &kBlocked[i];
  return NULL;
}

// Async-signal-safe: only write() and exit_group. The harness looks for this exact prefix at the start of
// a line; the newline before it ends whatever partial line the candidate left.
static void on_blocked(int sig, siginfo_t* info, void* context) {
  (void)sig;
  (void)context;
  const struct Blocked* call = blocked_call(info->si_syscall);
  write_text("\nkernelblaster-sandbox: blocked ");
  write_text(call ? call->name : "a system call");
  write_text(" (the candidate tried to ");
  write_text(call ? call->attempt : "make a forbidden system call");
  write_text(")\n");
  syscall(SYS_exit_group, kExitBlocked);
}

#define KB_STMT(code, k) ((struct sock_filter)BPF_STMT(code, k))
#define KB_JUMP(code, k, jt, jf) ((struct sock_filter)BPF_JUMP(code, k, jt, jf))
#define KB_MAX_FILTER 128

static size_t build_filter(struct sock_filter* f) {
  size_t n = 0;
  f[n++] = KB_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch));
  f[n++] = KB_JUMP(BPF_JMP | BPF_JEQ | BPF_K, KB_AUDIT_ARCH, 1, 0);
  f[n++] = KB_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
  f[n++] = KB_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr));
#if defined(__x86_64__)
  // The x32 ABI numbers every call again above this bit; nothing here uses it.
  f[n++] = KB_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000u, 0, 1);
  f[n++] = KB_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
#endif
  for (size_t i = 0; i < sizeof kBlocked / sizeof kBlocked[0]; ++i) {
    f[n++] = KB_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)kBlocked[i].nr, 0, 1);
    f[n++] = KB_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRAP);
  }
  // rt_sigaction(SIGSYS, act != NULL, ...): a new handler (or SIG_IGN) for SIGSYS. Asking for the current
  // one (act == NULL) is allowed. A candidate that blocks SIGSYS instead is killed by it (the kernel forces
  // the default action on a blocked SIGSYS from seccomp): status 159 without a name.
  f[n++] = KB_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_rt_sigaction, 0, 8);
  f[n++] = KB_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0]));
  f[n++] = KB_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SIGSYS, 0, 4);
  f[n++] = KB_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[1]));
  f[n++] = KB_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 0, 3);
  f[n++] = KB_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[1]) + 4);
  f[n++] = KB_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 0, 1);
  f[n++] = KB_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
  f[n++] = KB_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRAP);
  // clone3 passes its flags in memory, out of a filter's reach: refuse it, and glibc falls back to clone.
  f[n++] = KB_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone3, 0, 1);
  f[n++] = KB_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS);
  // clone is allowed for threads (CUDA and the C++ runtime start some) and stopped for processes.
  f[n++] = KB_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone, 0, 4);
  f[n++] = KB_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0]));
  f[n++] = KB_JUMP(BPF_JMP | BPF_JSET | BPF_K, CLONE_THREAD, 0, 1);
  f[n++] = KB_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
  f[n++] = KB_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRAP);
  f[n++] = KB_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
  return n;
}

static int install_filter(void) {
  struct sigaction action;
  memset(&action, 0, sizeof action);
  action.sa_sigaction = on_blocked;
  action.sa_flags = SA_SIGINFO;
  if (sigaction(SIGSYS, &action, NULL) != 0) return -1;
  struct sock_filter filter[KB_MAX_FILTER];
  struct sock_fprog program = {(unsigned short)build_filter(filter), filter};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return -1;
  return (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &program);
}

// Best effort: without /proc (where CUDA cannot run either) the driver simply keeps the harness's score.
static void prefer_for_oom_kill(void) {
  int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
  if (fd < 0) return;
  ssize_t written = write(fd, "1000", 4);
  (void)written;
  close(fd);
}

static int set_limit(int resource, unsigned long long value) {
  struct rlimit limit = {(rlim_t)value, (rlim_t)value};
  return setrlimit(resource, &limit);
}

static void fail(const char* what, const char* detail) {
  fprintf(stderr, "kb_launcher: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
  exit(kExitLaunchFailed);
}

static unsigned long long number(const char* option, const char* text) {
  char* end = NULL;
  errno = 0;
  unsigned long long value = text ? strtoull(text, &end, 10) : 0;
  if (text == NULL || *text == '\0' || *end != '\0' || errno != 0) {
    fprintf(stderr, "kb_launcher: %s needs a non-negative integer\n", option);
    exit(kExitUsage);
  }
  return value;
}

int main(int argc, char** argv) {
  int filter = 1;
  int i = 1;
  for (; i < argc && strncmp(argv[i], "--", 2) == 0; ++i) {
    const char* option = argv[i];
    if (strcmp(option, "--no-filter") == 0) {
      filter = 0;
      continue;
    }
    unsigned long long value = number(option, i + 1 < argc ? argv[i + 1] : NULL);
    ++i;
    int resource = strcmp(option, "--cpu-seconds") == 0  ? RLIMIT_CPU
                   : strcmp(option, "--file-bytes") == 0 ? RLIMIT_FSIZE
                   : strcmp(option, "--tasks") == 0      ? RLIMIT_NPROC
                   : strcmp(option, "--data-bytes") == 0 ? RLIMIT_DATA
                                                         : -1;
    if (resource < 0) {
      fprintf(stderr, "kb_launcher: unknown option %s\n", option);
      return kExitUsage;
    }
    if (set_limit(resource, value) != 0) fail("setting a resource limit", strerror(errno));
  }
  if (i + 2 != argc) {
    fprintf(stderr, "usage: kb_launcher [--no-filter] [--cpu-seconds N] [--file-bytes N] [--tasks N] "
                    "[--data-bytes N] DRIVER_LIBRARY CANDIDATE_LIBRARY\n");
    return kExitUsage;
  }
  if (set_limit(RLIMIT_CORE, 0) != 0) fail("disabling core files", strerror(errno));
  prefer_for_oom_kill();
  g_report_fd = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
  if (g_report_fd < 0) fail("copying stderr", strerror(errno));
  if (filter && install_filter() != 0) fail("installing the system-call filter", strerror(errno));

  int protocol_fd = fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
  if (protocol_fd < 0 || dup2(STDERR_FILENO, STDOUT_FILENO) < 0) fail("taking stdout", strerror(errno));

  // The driver first, every symbol bound now: when the candidate's library arrives, nothing in the driver
  // is left to bind, and RTLD_LOCAL keeps the candidate's symbols out of every other object's scope.
  void* driver = dlopen(argv[i], RTLD_NOW | RTLD_LOCAL);
  if (driver == NULL) fail("cannot load the driver library", dlerror());
  int (*driver_main)(int, void*) = (int (*)(int, void*))dlsym(driver, "kb_driver_main");
  if (driver_main == NULL) fail("the driver library has no kb_driver_main", dlerror());
  void* candidate = dlopen(argv[i + 1], RTLD_NOW | RTLD_LOCAL);
  if (candidate == NULL) fail("cannot load the candidate's library", dlerror());
  void* forward = dlsym(candidate, "kb_forward");
  if (forward == NULL) fail("the candidate's library has no kb_forward", dlerror());
  return driver_main(protocol_fd, forward);
}
