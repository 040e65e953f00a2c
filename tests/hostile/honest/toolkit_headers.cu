// HONEST: the toolkit's header libraries in device code (CUB, libcu++, cooperative groups, half types, WMMA,
// barriers) and the C++ library's on the host: it must build.
#include <cub/block/block_reduce.cuh>
#include <cuda/std/atomic>
#include <cuda/barrier>
#include <cooperative_groups.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <mma.h>
#include <vector>
#include <algorithm>
#include <mutex>
#include "kb_problem.h"

__global__ void block_sum(const float* x, float* out, int n) {
  using R = cub::BlockReduce<float, 128>;
  __shared__ typename R::TempStorage tmp;
  float v = threadIdx.x < n ? x[threadIdx.x] : 0.f;
  float s = R(tmp).Sum(v);
  if (threadIdx.x == 0) { cuda::atomic_ref<float, cuda::thread_scope_device> r(*out); r.fetch_add(s); }
}
extern "C" int kb_forward(const KBTensor* inputs, const KBTensor*, KBTensor* outputs, cudaStream_t stream) {
  static std::mutex m; std::lock_guard<std::mutex> g(m);
  std::vector<float> v(4, 1.f); std::sort(v.begin(), v.end());
  if (KB_IN_X_NUMEL < 0) block_sum<<<1, 128, 0, stream>>>(nullptr, nullptr, 0);
  return launch_swish(inputs, outputs, stream);
}
