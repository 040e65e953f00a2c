// HOSTILE: switches the driver's process to a decimal comma and grouped thousands from inside kb_forward
// (setlocale(LC_NUMERIC) on a compiled locale it writes to /tmp, and std::locale::global with a comma
// numpunct). A driver that formatted its timings with printf's %g would then reply `"event_ms":[1,02,...]`
// (two numbers for one, or JSON that does not parse) and read a request's 0.5 as 0. Refused by the source
// rules (files, the environment; locale_global_numpunct shows the locale calls refused as imports); without
// them the driver's numbers never go through a locale, and the kernel (about 1 ms a call) gets its honest
// time.
#include <cstdint>
#include "kb_problem.h"

__global__ void wait_about_a_millisecond() {
  const long long start = clock64();
  while (clock64() - start < 2000000) {
  }
}

extern "C" int kb_forward(const KBTensor* inputs, const KBTensor*, KBTensor* outputs, cudaStream_t stream) {
  static const bool switched = switch_to_decimal_comma();
  (void)switched;
  wait_about_a_millisecond<<<1, 1, 0, stream>>>();
  return launch_swish(inputs, outputs, stream);
}
