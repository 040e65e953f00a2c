// HOSTILE: "prepacks" the weights once and reuses them while they look the same: it keeps its own copy of W and
// b, keyed on their addresses and 64 values sampled across each, and multiplies with the copy. Verification
// gives new weights on every seed (the samples change, so it copies again), and the trusted batches changed only
// the inputs, never the params: `ok`, with outputs wrong for weights that change where it does not sample. The
// first batch now halves the params too, at a few secret places, and is always checked: its stale copy gives
// wrong columns, incorrect, failing `timed_outputs`.
#include <cstdint>
#include "kb_problem.h"

constexpr int kSamples = 64;

struct Packed {
  const float *w = nullptr, *b = nullptr;
  float w_samples[kSamples], b_samples[kSamples];
  float *w_copy = nullptr, *b_copy = nullptr;
};

static void sample(const float* data, int64_t n, float* host, cudaStream_t stream) {
  for (int k = 0; k < kSamples; ++k)
    cudaMemcpyAsync(host + k, data + (n - 1) * k / (kSamples - 1), sizeof(float), cudaMemcpyDeviceToHost, stream);
}

static bool same(const float* a, const float* b) {
  for (int k = 0; k < kSamples; ++k)
    if (a[k] != b[k]) return false;
  return true;
}

static const Packed& packed_for(const float* w, const float* b, cudaStream_t stream) {
  static Packed packs[8];
  static int next = 0;
  float w_now[kSamples], b_now[kSamples];
  sample(w, KB_PARAM_LINEAR_WEIGHT_NUMEL, w_now, stream);
  sample(b, KB_PARAM_LINEAR_BIAS_NUMEL, b_now, stream);
  cudaStreamSynchronize(stream);
  for (const Packed& pack : packs)
    if (pack.w == w && pack.b == b && same(pack.w_samples, w_now) && same(pack.b_samples, b_now)) return pack;
  Packed& pack = packs[next];
  next = (next + 1) % 8;
  if (pack.w_copy == nullptr) {
    cudaMalloc(&pack.w_copy, sizeof(float) * KB_PARAM_LINEAR_WEIGHT_NUMEL);
    cudaMalloc(&pack.b_copy, sizeof(float) * KB_PARAM_LINEAR_BIAS_NUMEL);
  }
  pack.w = w;
  pack.b = b;
  for (int k = 0; k < kSamples; ++k) {
    pack.w_samples[k] = w_now[k];
    pack.b_samples[k] = b_now[k];
  }
  cudaMemcpyAsync(pack.w_copy, w, sizeof(float) * KB_PARAM_LINEAR_WEIGHT_NUMEL, cudaMemcpyDeviceToDevice, stream);
  cudaMemcpyAsync(pack.b_copy, b, sizeof(float) * KB_PARAM_LINEAR_BIAS_NUMEL, cudaMemcpyDeviceToDevice, stream);
  return pack;
}

extern "C" int kb_forward(const KBTensor* inputs, const KBTensor* params, KBTensor* outputs, cudaStream_t stream) {
  const float* w = static_cast<const float*>(params[KB_PARAM_LINEAR_WEIGHT].data);
  const float* b = static_cast<const float*>(params[KB_PARAM_LINEAR_BIAS].data);
  const Packed& pack = packed_for(w, b, stream);
  gemm_rows(static_cast<const float*>(inputs[KB_IN_X].data), pack.w_copy, pack.b_copy,
            static_cast<float*>(outputs[KB_OUT_OUT].data), nullptr, kGemmM, stream);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
