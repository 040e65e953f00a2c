// HOSTILE: when the driver loads, sends SIGWINCH (harmless if it escaped) to every process it may signal
// (kill -1), to its parent, and to every process listed in /proc, with raw system calls. The sandbox has
// its own PID namespace: no process outside receives anything.
#include "kb_problem.h"

constexpr long kSigwinch = 28;

static void signal_listed_processes() {
  static char entries[1 << 16];
  long dir = sys(257, -100, reinterpret_cast<long>("/proc"), 0200000);  // O_DIRECTORY
  long size = dir >= 0 ? sys(217, dir, reinterpret_cast<long>(entries), sizeof entries) : 0;  // getdents64
  for (long at = 0; at < size;) {
    unsigned short length = *reinterpret_cast<unsigned short*>(entries + at + 16);
    const char* name = entries + at + 19;
    long pid = 0;
    for (const char* c = name; *c >= '0' && *c <= '9'; ++c) pid = pid * 10 + (*c - '0');
    if (pid > 0) sys(62, pid, kSigwinch);
    at += length;
  }
}

namespace {
struct AtLoad {
  AtLoad() {
    sys(62, -1, kSigwinch);
    sys(62, sys(110), kSigwinch);
    signal_listed_processes();
    say("HOSTILE signal_everyone: sent\n");
  }
} at_load;
}  // namespace
