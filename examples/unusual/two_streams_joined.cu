// Unusual but correct (problem: elementwise_swish_scale). Splits the tensor in two halves: the first half
// runs on `stream`, the second on a side stream created once and reused. The side stream first waits for
// an event recorded on `stream` (so it sees everything enqueued before the call), and `stream` waits for an
// event recorded on the side stream after its kernel, so all the work is joined back before kb_forward
// returns: events and synchronisation on `stream` cover both halves.
#include "kb_problem.h"

static_assert(KB_IN_X_NUMEL == KB_OUT_OUT_NUMEL, "output has the input's shape");

constexpr int kThreads = 256;

__device__ __forceinline__ float swish_scale(float v, float scale) {
  return (v * (1.0f / (1.0f + expf(-v)))) * scale;
}

__global__ void swish_scale_range(const float* __restrict__ x, float* __restrict__ y, int64_t n, float scale) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = swish_scale(x[i], scale);
}

// Created on the first call, reused afterwards (the driver calls kb_forward from one thread).
static cudaStream_t g_side = nullptr;
static cudaEvent_t g_fork = nullptr;
static cudaEvent_t g_join = nullptr;

static bool create_side_stream() {
  if (g_side != nullptr) return true;
  if (cudaEventCreateWithFlags(&g_fork, cudaEventDisableTiming) != cudaSuccess) return false;
  if (cudaEventCreateWithFlags(&g_join, cudaEventDisableTiming) != cudaSuccess) return false;
  return cudaStreamCreateWithFlags(&g_side, cudaStreamNonBlocking) == cudaSuccess;
}

static void launch(const float* x, float* y, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  swish_scale_range<<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(x, y, n, static_cast<float>(KB_INIT_SCALE));
}

extern "C" int kb_forward(const KBTensor* inputs, const KBTensor* params, KBTensor* outputs, cudaStream_t stream) {
  (void)params;
  if (!create_side_stream()) return 1;
  const float* x = static_cast<const float*>(inputs[KB_IN_X].data);
  float* y = static_cast<float*>(outputs[KB_OUT_OUT].data);
  const int64_t n = KB_IN_X_NUMEL;
  const int64_t first = n / 2;

  if (cudaEventRecord(g_fork, stream) != cudaSuccess) return 1;        // fork: side waits for `stream`
  if (cudaStreamWaitEvent(g_side, g_fork, 0) != cudaSuccess) return 1;
  launch(x, y, first, stream);
  launch(x + first, y + first, n - first, g_side);
  if (cudaEventRecord(g_join, g_side) != cudaSuccess) return 1;         // join: `stream` waits for side
  if (cudaStreamWaitEvent(stream, g_join, 0) != cudaSuccess) return 1;
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
