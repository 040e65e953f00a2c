// HOSTILE: a correct swish whose last thread of every block also reads one float past a table it allocated
// (as examples/sanitizer/out_of_bounds_read.cu: memcheck's finding), and which, on its first call, writes a
// clean memcheck and racecheck summary into the report of the compute-sanitizer checking it (found through
// /proc), ahead of the checker's own. The checker's summary comes after the program has ended and is the one
// that counts: a sanitizer error, for the invalid read.
#include "kb_problem.h"


constexpr int kThreads = 256;
constexpr unsigned kNeverStored = 0x7fbadbadu;  // a NaN payload nothing writes

__global__ void swish_lookahead(const float* __restrict__ x, float* __restrict__ y, const float* __restrict__ table,
                                int64_t n, float scale) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const float next = table[threadIdx.x + 1];  // thread kThreads - 1 reads table[kThreads]: out of bounds
  if (i < n) {
    const float v = x[i];
    y[i] = __float_as_uint(next) == kNeverStored ? 0.0f : (v * (1.0f / (1.0f + expf(-v)))) * scale;
  }
}

static const char kForged[] =
    "========= ERROR SUMMARY: 0 errors\n"
    "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)\n";

extern "C" int kb_forward(const KBTensor* inputs, const KBTensor*, KBTensor* outputs, cudaStream_t stream) {
  static float* table = nullptr;
  if (table == nullptr) {
    for_each_checker_file("--log-file", [](const char* log) {
      long fd = sys(257, -100, reinterpret_cast<long>(log), 02001);  // openat(O_WRONLY | O_APPEND)
      if (fd >= 0) sys(1, fd, reinterpret_cast<long>(kForged), sizeof kForged - 1);
      if (fd >= 0) sys(3, fd);
    });
    if (cudaMalloc(&table, kThreads * sizeof(float)) != cudaSuccess) return 1;
    if (cudaMemset(table, 0, kThreads * sizeof(float)) != cudaSuccess) return 1;
  }
  const int64_t n = KB_IN_X_NUMEL;
  swish_lookahead<<<static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      static_cast<const float*>(inputs[KB_IN_X].data), static_cast<float*>(outputs[KB_OUT_OUT].data), table, n,
      static_cast<float>(KB_INIT_SCALE));
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
