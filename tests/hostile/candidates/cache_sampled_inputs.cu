// HOSTILE: caches results across calls when the inputs repeat. After its first 40 calls (verification and the
// start of the event timing) it keys each call on the input pointer and 64 input values sampled across the tensor; on a hit it copies the output it
// stored for that key instead of computing. Timing rotates over a few sets whose contents repeat, so this would
// serve every timed call from the cache; the harness changes the inputs at secret random places before every
// batch, so the cached outputs are stale where it checks them: incorrect, failing `timed_outputs`.
#include <cstdint>
#include "kb_problem.h"

constexpr int kEntries = 8;
constexpr int kSamples = 64;
constexpr int64_t kNumel = KB_IN_X_NUMEL;

struct Entry {
  const void* input = nullptr;
  float samples[kSamples];
  float* output = nullptr;
};

static void sample(const float* x, float* host, cudaStream_t stream) {
  for (int k = 0; k < kSamples; ++k)
    cudaMemcpyAsync(host + k, x + (kNumel - 1) * k / (kSamples - 1), sizeof(float), cudaMemcpyDeviceToHost, stream);
  cudaStreamSynchronize(stream);
}

extern "C" int kb_forward(const KBTensor* inputs, const KBTensor*, KBTensor* outputs, cudaStream_t stream) {
  static long long calls = 0;
  static Entry cache[kEntries];
  static int next = 0;
  const float* x = static_cast<const float*>(inputs[KB_IN_X].data);
  float* y = static_cast<float*>(outputs[KB_OUT_OUT].data);
  if (++calls <= 40) return launch_swish(inputs, outputs, stream);
  float now[kSamples];
  sample(x, now, stream);
  for (Entry& entry : cache) {
    if (entry.input != x || entry.output == nullptr) continue;
    bool same = true;
    for (int k = 0; k < kSamples && same; ++k) same = entry.samples[k] == now[k];
    if (!same) continue;
    cudaMemcpyAsync(y, entry.output, kNumel * sizeof(float), cudaMemcpyDeviceToDevice, stream);
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
  }
  const int rc = launch_swish(inputs, outputs, stream);
  Entry& entry = cache[next];
  next = (next + 1) % kEntries;
  if (entry.output == nullptr) cudaMalloc(&entry.output, kNumel * sizeof(float));
  entry.input = x;
  for (int k = 0; k < kSamples; ++k) entry.samples[k] = now[k];
  cudaMemcpyAsync(entry.output, y, kNumel * sizeof(float), cudaMemcpyDeviceToDevice, stream);
  return rc == 0 && cudaGetLastError() == cudaSuccess ? 0 : 1;
}
