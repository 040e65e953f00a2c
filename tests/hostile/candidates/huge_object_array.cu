// HOSTILE: a correct kernel whose source also defines a 300 MiB initialised array: its object takes 300 MiB of
// disk, kept three times over (object, library, the compile cache's copy) for every such candidate of a run,
// which a loop repeats until the disk is full and the harness fails. The object is refused (`object_size`) and
// deleted, and the compile cache keeps no object that large.
#include "kb_problem.h"

extern const char kb_ballast[300 << 20];
const char kb_ballast[300 << 20] = {1};

extern "C" int kb_forward(const KBTensor* inputs, const KBTensor*, KBTensor* outputs, cudaStream_t stream) {
  return kb_ballast[0] == 1 ? launch_swish(inputs, outputs, stream) : 1;
}
