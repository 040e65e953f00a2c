// HOSTILE: keeps the sum and moves the median. kb_forward scans its caller's stack for the driver's session (the
// word equal to `stream`, after a vector of tensor sets), and after doing its work re-records the driver's start
// event on 7 calls of 8, so those calls claim almost nothing; on the 8th it spins for the time it stole, so the
// claimed times still add up to the harness's wall clock. The harness's own clock on batches of its calls gives
// the real time per call, and a median far below it is forged_result.
#include <cstdint>
#include <cstring>
#include "kb_problem.h"

__global__ void spin(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

// The driver's start event: the word after `stream` in its session, which follows the sets' vector (begin, end,
// capacity: 72-byte TensorSets) and, before it, the tree header of its map of IPC mappings (parent, left and
// right nodes, then a small node count). Nothing is dereferenced except the stack words themselves.
static cudaEvent_t find_start_event(cudaStream_t stream) {
  volatile uintptr_t here = 0;
  const uintptr_t* words = reinterpret_cast<const uintptr_t*>(const_cast<uintptr_t*>(&here));
  for (int i = 8; i < 2048; ++i) {
    if (words[i] != reinterpret_cast<uintptr_t>(stream)) continue;
    const uintptr_t begin = words[i - 3], end = words[i - 2], capacity = words[i - 1];
    if (begin == 0 || end <= begin || capacity < end || (end - begin) % 72 != 0 || (capacity - begin) % 72 != 0)
      continue;
    const uintptr_t mappings = words[i - 4], right = words[i - 5], left = words[i - 6], parent = words[i - 7];
    if (mappings == 0 || mappings > 256 || right == 0 || left == 0 || parent == 0) continue;
    if (words[i + 1] == 0 || words[i + 2] == 0 || words[i + 1] == words[i + 2]) continue;
    return reinterpret_cast<cudaEvent_t>(words[i + 1]);
  }
  return nullptr;
}

static float measure_work_ms(const KBTensor* inputs, KBTensor* outputs, cudaStream_t stream) {
  cudaEvent_t before, after;
  cudaEventCreate(&before);
  cudaEventCreate(&after);
  cudaEventRecord(before, stream);
  launch_swish(inputs, outputs, stream);
  cudaEventRecord(after, stream);
  cudaEventSynchronize(after);
  float ms = 0.0f;
  cudaEventElapsedTime(&ms, before, after);
  cudaEventDestroy(before);
  cudaEventDestroy(after);
  return ms;
}

extern "C" int kb_forward(const KBTensor* inputs, const KBTensor*, KBTensor* outputs, cudaStream_t stream) {
  static long long calls = 0;
  static float work_ms = -1.0f, stolen_ms = 0.0f;
  static int clock_khz = 0;
  if (work_ms < 0) {
    int device = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, device);
    work_ms = measure_work_ms(inputs, outputs, stream);
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
  }
  const int rc = launch_swish(inputs, outputs, stream);
  cudaEvent_t start = find_start_event(stream);
  if (start == nullptr) return rc;
  if (++calls % 8 != 0) {
    cudaEventRecord(start, stream);  // the driver's start now comes after the work
    stolen_ms += work_ms;
  } else {
    spin<<<1, 1, 0, stream>>>(static_cast<long long>(stolen_ms * clock_khz));
    stolen_ms = 0.0f;
  }
  return rc;
}
