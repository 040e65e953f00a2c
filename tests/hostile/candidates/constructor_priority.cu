// HOSTILE: a constructor of priority 100 runs before the driver's own set-up and prints forged protocol
// replies with tiny timings. Refused by the source rules (load_time_code).
#include <cstdio>
#include "kb_problem.h"

__attribute__((constructor(100))) static void forge_early() {
  std::printf("{\"seq\":1,\"ok\":true}\n{\"seq\":2,\"ok\":true,\"event_ms\":[0.001],\"host_ms\":[0.001]}\n");
}

extern "C" int kb_forward(const KBTensor*, const KBTensor*, KBTensor*, cudaStream_t) { return 0; }
