// HOSTILE: calls glibc functions that no rule names (setmntent reads the mount table, glob lists host
// directories, wordexp runs a shell to expand words). Refused: each is an import that is not on the list of
// what candidates may call.
#include <glob.h>
#include <mntent.h>
#include <wordexp.h>
#include "kb_problem.h"

extern "C" int kb_forward(const KBTensor* inputs, const KBTensor*, KBTensor* outputs, cudaStream_t stream) {
  FILE* mounts = setmntent("/proc/mounts", "r");
  glob_t found;
  glob("/home/*", 0, nullptr, &found);
  wordexp_t words;
  wordexp("$(id)", &words, 0);
  return mounts == nullptr ? 1 : launch_swish(inputs, outputs, stream);
}
