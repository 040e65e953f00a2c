// HOSTILE: "prepacks" the weights once and reuses them while they look the same: it keeps its own copies of W and
// of b, each keyed on its address and 64 values sampled across it, and multiplies with the copies. Verification
// gives new weights on every seed (the samples change, so it copies again), and the trusted batches changed only
// the inputs, never the params: `ok`, with outputs wrong for weights that change where it does not sample. The
// first batch now halves the learned weights too, at a few secret places, and is always checked: the stale copy
// of W gives wrong columns, incorrect, failing `timed_outputs`.
#include <cstdint>
#include "kb_problem.h"

constexpr int kSamples = 64;
constexpr int kCopies = 8;

// A copy of one weight tensor, and what it looked like when copied.
struct Copy {
  const float* source = nullptr;
  float samples[kSamples];
  float* data = nullptr;
};

static void sample(const float* data, int64_t n, float* host, cudaStream_t stream) {
  for (int k = 0; k < kSamples; ++k)
    cudaMemcpyAsync(host + k, data + (n - 1) * k / (kSamples - 1), sizeof(float), cudaMemcpyDeviceToHost, stream);
  cudaStreamSynchronize(stream);
}

// The copy of `source` (n floats) whose samples match, or a new one.
static const float* copy_of(Copy (&copies)[kCopies], int& next, const float* source, int64_t n,
                            cudaStream_t stream) {
  float now[kSamples];
  sample(source, n, now, stream);
  for (const Copy& copy : copies) {
    if (copy.source != source) continue;
    bool same = true;
    for (int k = 0; k < kSamples && same; ++k) same = copy.samples[k] == now[k];
    if (same) return copy.data;
  }
  Copy& copy = copies[next];
  next = (next + 1) % kCopies;
  if (copy.data == nullptr) cudaMalloc(&copy.data, sizeof(float) * n);
  copy.source = source;
  for (int k = 0; k < kSamples; ++k) copy.samples[k] = now[k];
  cudaMemcpyAsync(copy.data, source, sizeof(float) * n, cudaMemcpyDeviceToDevice, stream);
  return copy.data;
}

extern "C" int kb_forward(const KBTensor* inputs, const KBTensor* params, KBTensor* outputs, cudaStream_t stream) {
  static Copy weights[kCopies], biases[kCopies];
  static int next_weight = 0, next_bias = 0;
  const float* w = copy_of(weights, next_weight, static_cast<const float*>(params[KB_PARAM_LINEAR_WEIGHT].data),
                           KB_PARAM_LINEAR_WEIGHT_NUMEL, stream);
  const float* b = copy_of(biases, next_bias, static_cast<const float*>(params[KB_PARAM_LINEAR_BIAS].data),
                           KB_PARAM_LINEAR_BIAS_NUMEL, stream);
  gemm_rows(static_cast<const float*>(inputs[KB_IN_X].data), w, b, static_cast<float*>(outputs[KB_OUT_OUT].data),
            nullptr, kGemmM, stream);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
