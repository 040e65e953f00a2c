// HOSTILE: memoises exactly, across calls: it keeps a copy of each set's x, W and b and of the y it gave, and
// on every call compares them bit for bit with what it is given, recomputes only the rows of y whose row of x
// changed (every row when W or b changed; four rows in any case, so every call costs the same) and copies the
// rest from its copy. Its outputs are right on every call; its time is not a call's work. The trusted batches
// changed the inputs at four places before each batch, so a batch cost four rows a call, and the harness's own
// clock agreed with a median a small fraction of the GEMM's: `ok`. Every batch after the first now refills the
// sets from a fresh secret seed, the memo misses there, and the event-timed calls, which it still serves from
// its copies, are far below the harness's own clock: forged_result.
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

// The rows `rows` names (the first `count` rows without a list) of y, one warp per element: fast for a few rows,
// where a tiled GEMM would leave most of the GPU idle.
__global__ void dot_rows(const float* x, const float* w, const float* b, float* y, const int* rows, int count) {
  const int64_t element = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (element >= static_cast<int64_t>(count) * kGemmN) return;
  const int slot = static_cast<int>(element / kGemmN), col = static_cast<int>(element % kGemmN);
  const int row = rows != nullptr ? rows[slot] : slot;
  float acc = 0.0f;
  for (int k = lane; k < kGemmK; k += 32)
    acc = fmaf(x[static_cast<int64_t>(row) * kGemmK + k], w[static_cast<int64_t>(col) * kGemmK + k], acc);
  for (int offset = 16; offset > 0; offset /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, offset);
  if (lane == 0) y[static_cast<int64_t>(row) * kGemmN + col] = relu_keep_nan(acc + b[col]);
}

static void recompute_rows(const float* x, const float* w, const float* b, float* y, const int* rows, int count,
                           cudaStream_t stream) {
  if (count <= 0) return;
  const int64_t threads = static_cast<int64_t>(count) * kGemmN * 32;
  dot_rows<<<static_cast<unsigned>((threads + 255) / 256), 256, 0, stream>>>(x, w, b, y, rows, count);
}

constexpr int kPaddedRows = 4;  // what a batch whose inputs changed at four places costs, in every call

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
  if (counts[1] != 0 || counts[0] > 64) {
    gemm_rows(x, w, b, memo.y_copy, nullptr, kGemmM, stream);  // new weights, or many new rows: every row
  } else {
    recompute_rows(x, w, b, memo.y_copy, memo.rows, counts[0], stream);  // only the rows of x that changed
    // Rows that did not change, recomputed to the same values: every call costs what a call in a batch whose
    // inputs changed at four places costs, so the event-timed calls' median agrees with the batches' clock.
    recompute_rows(x, w, b, memo.y_copy, nullptr, kPaddedRows - counts[0], stream);
  }
  cudaMemcpyAsync(y, memo.y_copy, sizeof(float) * kGemmM * kGemmN, cudaMemcpyDeviceToDevice, stream);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
