// HOSTILE: a strong definition (under an asm label) of std::vector<double>::_M_realloc_insert<double>, the
// weak template instantiation through which the driver's timing loop grows its list of event times; it stores
// every time it is given divided by 100. In one link unit with the driver, the strong definition would replace
// the driver's weak one and the times would shrink. The candidate is its own link unit (this definition is
// local to it, the driver binds its own instantiation), so the kernel (about 1 ms a call) is timed honestly.
#include <cstring>
#include <new>
#include "kb_problem.h"

struct DoubleVector {
  double* start;
  double* finish;
  double* end_of_storage;
};

extern "C" void kb_realloc_insert(DoubleVector* self, double* position, double* value)
    __asm__("_ZNSt6vectorIdSaIdEE17_M_realloc_insertIJdEEEvN9__gnu_cxx17__normal_iteratorIPdS1_EEDpOT_");

extern "C" void kb_realloc_insert(DoubleVector* self, double* position, double* value) {
  const size_t size = self->finish - self->start, before = position - self->start;
  const size_t capacity = size == 0 ? 1 : 2 * size;
  double* grown = static_cast<double*>(::operator new(capacity * sizeof(double)));
  if (before > 0) std::memcpy(grown, self->start, before * sizeof(double));
  grown[before] = *value / 100.0;
  if (size > before) std::memcpy(grown + before + 1, position, (size - before) * sizeof(double));
  ::operator delete(self->start);
  *self = {grown, grown + size + 1, grown + capacity};
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
