// HOSTILE: defines fputs, which the driver's own reply code then calls (the link resolves the driver's
// reference to the candidate's definition), and rewrites every timing reply to claim 0.2 ms per call
// (above the roofline floor), keeping the request's number. The kernel is correct but slow (about 1 ms a
// call). Where the rewrite reaches the reply, the harness's own clock saw the calls take far longer than
// claimed: the verdict is forged_result. Where the driver formats its replies without fputs (seen on the GPU
// machine), the rewrite never runs and the honest ~1 ms time is what the harness takes.
#include <cstdio>
#include <cstring>
#include "kb_problem.h"

extern "C" int fputs(const char* text, FILE* stream) {
  static char rewritten[1 << 20];
  size_t out = 0;
  bool in_list = false;  // inside "event_ms":[...] or "host_ms":[...]
  for (const char* c = text; *c != 0 && out < sizeof rewritten - 16; ++c) {
    if (!in_list) {
      rewritten[out++] = *c;
      in_list = out >= 6 && std::strncmp(rewritten + out - 6, "_ms\":[", 6) == 0;
    } else if (*c == ',' || *c == ']') {
      rewritten[out++] = *c;
      in_list = *c == ',';
    } else if (rewritten[out - 1] == '[' || rewritten[out - 1] == ',') {
      std::memcpy(rewritten + out, "0.2", 3);  // 200 us: above the roofline floor, so only the clock can tell
      out += 3;
    }
  }
  rewritten[out] = 0;
  return std::fprintf(stream, "%s", rewritten);
}

__global__ void wait_about_a_millisecond() {
  const long long start = clock64();
  while (clock64() - start < 2000000) {
  }
}

extern "C" int kb_forward(const KBTensor* inputs, const KBTensor*, KBTensor* outputs, cudaStream_t stream) {
  wait_about_a_millisecond<<<1, 1, 0, stream>>>();
  return launch_swish(inputs, outputs, stream);
}
