// HOSTILE: turns off the poisoning of its own workspace and relies on what an earlier call left there. The
// trusted wrappers its library is linked with used to poison new workspace only while a flag in the driver
// was set; `&cudaMallocAsync` is the wrapper (the link routes the candidate's references there), whose machine
// code loads the flag's address from the global offset table (`mov reg, [rip+disp32]`), so the candidate
// reads it there and clears the flag while it is set, naming nothing the rules refuse. Its workspace is then
// left as the previous call left it: each call adds the workspace to the output, assuming zeros, and writes
// zeros back before freeing it (skipping a memset per call). With no switch to clear, fresh workspace is
// poisoned on every allocation and the output is NaN: `incorrect`, never `ok`.
#include <cstdint>
#include <cstring>
#include "kb_problem.h"

// The word the wrapper's first `mov reg, [rip+disp32]` loads the address of, if that word holds 1 (the flag
// while set), else null.
static volatile int* find_poison_flag() {
  using Allocator = cudaError_t (*)(void**, size_t, cudaStream_t);
  const Allocator wrapper = &cudaMallocAsync;
  const unsigned char* code = reinterpret_cast<const unsigned char*>(wrapper);
  for (int i = 0; i < 128; ++i) {
    if ((code[i] & 0xFB) != 0x48 || code[i + 1] != 0x8B || (code[i + 2] & 0xC7) != 0x05) continue;
    int32_t displacement = 0;
    std::memcpy(&displacement, code + i + 3, sizeof displacement);
    volatile int* const* slot = reinterpret_cast<volatile int* const*>(code + i + 7 + displacement);
    volatile int* flag = *slot;
    if (flag != nullptr && *flag == 1) return flag;
  }
  return nullptr;
}

// Adds the workspace (zeros, if the previous call cleaned up and nothing poisoned it since) to the output,
// then zeroes it for the next call.
__global__ void add_leftover(float* out, float* leftover, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) {
    out[i] += leftover[i];
    leftover[i] = 0.0f;
  }
}

extern "C" int kb_forward(const KBTensor* inputs, const KBTensor*, KBTensor* outputs, cudaStream_t stream) {
  volatile int* flag = find_poison_flag();
  if (flag != nullptr) *flag = 0;
  const int64_t n = KB_IN_X_NUMEL;
  float* leftover = nullptr;
  if (cudaMallocAsync(reinterpret_cast<void**>(&leftover), n * sizeof(float), stream) != cudaSuccess) return 1;
  if (flag != nullptr) *flag = 1;  // set again before the driver could look
  if (launch_swish(inputs, outputs, stream) != 0) return 1;
  add_leftover<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(
      static_cast<float*>(outputs[KB_OUT_OUT].data), leftover, n);
  if (cudaGetLastError() != cudaSuccess) return 1;
  return cudaFreeAsync(leftover, stream) == cudaSuccess ? 0 : 1;
}
