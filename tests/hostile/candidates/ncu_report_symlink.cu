// HOSTILE: while ncu profiles it, kb_forward puts a symbolic link to /proc/self/environ where ncu will write
// its report (its `--export` path, found through /proc), so that a harness importing the report by its name
// parses its own environment. The report is taken out of its folder without following links: a profile of
// ncu's own report, or none, and nothing of the harness in the result.
#include "kb_problem.h"

extern "C" int kb_forward(const KBTensor* inputs, const KBTensor*, KBTensor* outputs, cudaStream_t stream) {
  static bool attacked = false;
  if (!attacked) {
    attacked = true;
    for_each_checker_file("--export", [](const char* report) {
      sys(87, reinterpret_cast<long>(report));  // unlink
      long linked = sys(88, reinterpret_cast<long>("/proc/self/environ"), reinterpret_cast<long>(report));
      say(linked == 0 ? "HOSTILE put a link where ncu writes its report\n" : "HOSTILE could not place the link\n");
    });
  }
  return launch_swish(inputs, outputs, stream);
}
