// KernelBlaster workspace poisoning, trusted, linked into every candidate's shared object (not into the
// driver). The candidate's calls to the cudaMalloc family are redirected here when its object is linked
// (-Xlinker --wrap=cudaMalloc ...; only the candidate's own references are redirected). While the driver
// calls the candidate in `run`, `batch` or `time`, it sets kb_poison_workspace, and new workspace is filled
// with 0xFF bytes, a NaN pattern for every float type, so a candidate that reads memory it never wrote (a
// previous call's results left in a recycled allocation) fails whichever call is checked; verification and
// timing alike, so the candidate cannot tell them apart by its workspace. Profiling calls are not poisoned.
//
// The flag lives in the driver library (kb_driver.cu), which exports it; the candidate's library binds to
// it when it is loaded (the candidate may bind to the driver, never the driver to the candidate).
#include <cuda_runtime.h>

extern "C" {
extern volatile int kb_poison_workspace;
cudaError_t __real_cudaMalloc(void** ptr, size_t size);
cudaError_t __real_cudaMallocAsync(void** ptr, size_t size, cudaStream_t stream);
cudaError_t __real_cudaMallocFromPoolAsync(void** ptr, size_t size, cudaMemPool_t pool, cudaStream_t stream);
cudaError_t __real_cudaMallocPitch(void** ptr, size_t* pitch, size_t width, size_t height);
}

constexpr int kPoisonByte = 0xFF;

// cudaMemset runs on the legacy default stream, which does not order against the candidate's
// non-blocking stream, so wait for it before the candidate can launch a reader.
static cudaError_t poison_now(void* ptr, size_t bytes) {
  cudaError_t err = cudaMemset(ptr, kPoisonByte, bytes);
  return err == cudaSuccess ? cudaStreamSynchronize(cudaStreamLegacy) : err;
}

extern "C" cudaError_t __wrap_cudaMalloc(void** ptr, size_t size) {
  cudaError_t err = __real_cudaMalloc(ptr, size);
  if (err != cudaSuccess || !kb_poison_workspace || size == 0) return err;
  return poison_now(*ptr, size);
}

extern "C" cudaError_t __wrap_cudaMallocPitch(void** ptr, size_t* pitch, size_t width, size_t height) {
  cudaError_t err = __real_cudaMallocPitch(ptr, pitch, width, height);
  if (err != cudaSuccess || !kb_poison_workspace || *pitch * height == 0) return err;
  return poison_now(*ptr, *pitch * height);
}

// Stream-ordered allocations are poisoned in stream order, before anything the candidate enqueues next.
extern "C" cudaError_t __wrap_cudaMallocAsync(void** ptr, size_t size, cudaStream_t stream) {
  cudaError_t err = __real_cudaMallocAsync(ptr, size, stream);
  if (err != cudaSuccess || !kb_poison_workspace || size == 0) return err;
  return cudaMemsetAsync(*ptr, kPoisonByte, size, stream);
}

extern "C" cudaError_t __wrap_cudaMallocFromPoolAsync(void** ptr, size_t size, cudaMemPool_t pool,
                                                      cudaStream_t stream) {
  cudaError_t err = __real_cudaMallocFromPoolAsync(ptr, size, pool, stream);
  if (err != cudaSuccess || !kb_poison_workspace || size == 0) return err;
  return cudaMemsetAsync(*ptr, kPoisonByte, size, stream);
}
