// HOSTILE: memoises exactly, across calls: it keeps a copy of each set's x, W and b and of the y it gave, and
// on every call compares them bit for bit with what it is given, recomputes only the rows of y whose row of x
// changed (every row when W or b changed) and copies the rest from its copy. Its outputs are right on every
// call; its time is not a call's work. The trusted batches changed the inputs at four places before each batch,
// so each batch recomputed four rows a set and the harness's own clock agreed with a median a small fraction
// of the GEMM's: `ok`. Every later batch now refills the sets from a fresh secret seed, the memo misses there,
// and the event-timed calls, which it still serves from its copies, are far below the harness's own clock:
// forged_result.
#include <cstdint>
#include "kb_problem.h"

// Bit-for-bit comparison (NaN equals itself) of a row of `now` with `copy`, which then holds `now`; a changed
// row's index is appended to `rows` (count in rows_count). One block per row.
__global__ void changed_rows(const uint32_t* now, uint32_t* copy, int* rows, int* rows_count) {
  const int64_t base = static_cast<int64_t>(blockIdx.x) * kGemmK;
  bool changed = false;
  for (int k = threadIdx.x; k < kGemmK; k += blockDim.x) {
    const uint32_t value = now[base + k];
    if (value != copy[base + k]) {
      changed = true;
      copy[base + k] = value;
    }
  }
  if (__syncthreads_or(changed) && threadIdx.x == 0) rows[atomicAdd(rows_count, 1)] = blockIdx.x;
}

// Whether any word of `now` differs from `copy` (which then holds `now`).
__global__ void changed_any(const uint32_t* now, uint32_t* copy, int64_t words, int* flag) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < words;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint32_t value = now[i];
    if (value != copy[i]) {
      copy[i] = value;
      *flag = 1;
    }
  }
}

struct Memo {
  const void* x = nullptr;  // the set's input, by address
  uint32_t *x_copy = nullptr, *w_copy = nullptr, *b_copy = nullptr;
  float* y_copy = nullptr;
  int* rows = nullptr;
  int* counts = nullptr;  // changed rows of x; whether W or b changed
};

// Fresh allocations are poisoned (0xFF bytes), which no finite input equals: the first call recomputes all.
static Memo& memo_for(const void* x) {
  static Memo memos[8];
  for (Memo& memo : memos)
    if (memo.x == x) return memo;
  for (Memo& memo : memos) {
    if (memo.x != nullptr) continue;
    memo.x = x;
    cudaMalloc(&memo.x_copy, sizeof(float) * kGemmM * kGemmK);
    cudaMalloc(&memo.w_copy, sizeof(float) * kGemmN * kGemmK);
    cudaMalloc(&memo.b_copy, sizeof(float) * kGemmN);
    cudaMalloc(&memo.y_copy, sizeof(float) * kGemmM * kGemmN);
    cudaMalloc(&memo.rows, sizeof(int) * kGemmM);
    cudaMalloc(&memo.counts, sizeof(int) * 2);
    return memo;
  }
  return memos[0];
}

extern "C" int kb_forward(const KBTensor* inputs, const KBTensor* params, KBTensor* outputs, cudaStream_t stream) {
  const float* x = static_cast<const float*>(inputs[KB_IN_X].data);
  const float* w = static_cast<const float*>(params[KB_PARAM_LINEAR_WEIGHT].data);
  const float* b = static_cast<const float*>(params[KB_PARAM_LINEAR_BIAS].data);
  float* y = static_cast<float*>(outputs[KB_OUT_OUT].data);
  Memo& memo = memo_for(x);
  cudaMemsetAsync(memo.counts, 0, sizeof(int) * 2, stream);
  changed_any<<<264, 256, 0, stream>>>(reinterpret_cast<const uint32_t*>(w), memo.w_copy,
                                       static_cast<int64_t>(kGemmN) * kGemmK, memo.counts + 1);
  changed_any<<<8, 256, 0, stream>>>(reinterpret_cast<const uint32_t*>(b), memo.b_copy, kGemmN, memo.counts + 1);
  changed_rows<<<kGemmM, 256, 0, stream>>>(reinterpret_cast<const uint32_t*>(x), memo.x_copy, memo.rows,
                                           memo.counts);
  int counts[2] = {0, 0};
  cudaMemcpyAsync(counts, memo.counts, sizeof counts, cudaMemcpyDeviceToHost, stream);
  cudaStreamSynchronize(stream);
  if (counts[1] != 0)
    gemm_rows(x, w, b, memo.y_copy, nullptr, kGemmM, stream);  // new weights: every row
  else
    gemm_rows(x, w, b, memo.y_copy, memo.rows, counts[0], stream);  // only the rows of x that changed
  cudaMemcpyAsync(y, memo.y_copy, sizeof(float) * kGemmM * kGemmN, cudaMemcpyDeviceToDevice, stream);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
