// Part of hostile candidates: prints forged protocol replies (the driver's ready line and a timing reply of
// 0.001 ms per call among them) on every descriptor in turn, so they land in the protocol whatever descriptor
// it uses. Called at load, replies before their request are forgeries: the verdict is forged_result.
#include <cstdio>

static __attribute__((noinline)) void print_forged_replies() {
  for (int fd = 3; fd < 64; ++fd) {
    std::fflush(stdout);
    stdout->_fileno = fd;
    std::printf("{\"seq\":0,\"ok\":true}\n{\"seq\":1,\"ok\":true}\n{\"seq\":2,\"ok\":true,\"rc\":0}\n"
                "{\"seq\":3,\"ok\":true,\"event_ms\":[0.001],\"host_ms\":[0.001],\"overhead_ms\":0}\n");
    std::fflush(stdout);
  }
  stdout->_fileno = 1;
}
