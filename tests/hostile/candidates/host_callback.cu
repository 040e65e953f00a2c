// HOSTILE: queues a host function on the stream (host code run by a CUDA thread, outside kb_forward), named
// through a macro. Refused by the object's symbols (host_callbacks).
#include "kb_problem.h"

#define JOIN(a, b) a##b
static void on_host(void*) {}

extern "C" int kb_forward(const KBTensor*, const KBTensor*, KBTensor*, cudaStream_t stream) {
  return JOIN(cudaLaunch, HostFunc)(stream, on_host, nullptr) == cudaSuccess ? 0 : 1;
}
