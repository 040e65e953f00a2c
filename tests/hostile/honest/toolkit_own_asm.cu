// HONEST: a toolkit header's own host asm (libcu++'s spin-wait pause, through its own macro) is not the
// candidate's: it must build.
#include <cuda/std/atomic>
#include "kb_problem.h"

extern "C" int kb_forward(const KBTensor* inputs, const KBTensor*, KBTensor* outputs, cudaStream_t stream) {
  cuda::std::__cccl_thread_yield_processor();
  return launch_swish(inputs, outputs, stream);
}
