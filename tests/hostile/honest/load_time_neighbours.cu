// HONEST: what correct kernels write next to the paths the hostile suite attacks at load and in sections:
// template kernels with struct parameters, __device__ and __constant__ variables of struct type, a function
// in a named .text section, a constant table and printing with <iostream>. It must build.
#include <iostream>
#include "kb_problem.h"
struct Params { const float* x; float* y; int64_t n; float scale; };
struct Coeffs { float a, b; };
__constant__ Coeffs coeffs[4];
__device__ Coeffs device_coeffs;
static const float kTable[4] = {1.f, 2.f, 3.f, 4.f};
template <int Unroll>
__global__ void swish_t(Params p) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < p.n) p.y[i] = (p.x[i] * (1.0f / (1.0f + expf(-p.x[i])))) * p.scale * (Unroll > 0 ? 1.0f : 1.0f);
}
__attribute__((section(".text.kb_hot"))) static unsigned blocks(int64_t n) { return static_cast<unsigned>((n + 255) / 256); }
extern "C" int kb_forward(const KBTensor* inputs, const KBTensor*, KBTensor* outputs, cudaStream_t stream) {
  Params p{static_cast<const float*>(inputs[KB_IN_X].data), static_cast<float*>(outputs[KB_OUT_OUT].data),
           KB_IN_X_NUMEL, static_cast<float>(KB_INIT_SCALE) * (kTable[0] / kTable[0])};
  if (p.n > (int64_t{1} << 40)) swish_t<1><<<blocks(p.n), 256, 0, stream>>>(p);
  else swish_t<0><<<blocks(p.n), 256, 0, stream>>>(p);
  if (cudaGetLastError() != cudaSuccess) { std::cerr << "launch failed" << std::endl; return 1; }
  return 0;
}
