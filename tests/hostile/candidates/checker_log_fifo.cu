// HOSTILE: on its first call, kb_forward replaces the report of the compute-sanitizer checking it (found
// through /proc) with a FIFO, so that a harness opening the report by its name waits forever. The report is
// a pipe the harness made and drains itself: the run ends, and the kernel's own report stands (clean).
#include "kb_problem.h"


extern "C" int kb_forward(const KBTensor* inputs, const KBTensor*, KBTensor* outputs, cudaStream_t stream) {
  static bool attacked = false;
  if (!attacked) {
    attacked = true;
    for_each_checker_file("--log-file", [](const char* log) {
      sys(87, reinterpret_cast<long>(log));  // unlink
      long made = sys(133, reinterpret_cast<long>(log), 0010600, 0);  // mknod(S_IFIFO | 0600)
      say(made == 0 ? "HOSTILE replaced the checker's report with a FIFO\n" : "HOSTILE could not replace the report\n");
    });
  }
  return launch_swish(inputs, outputs, stream);
}
