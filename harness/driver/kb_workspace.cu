// KernelBlaster workspace poisoning, trusted, linked into every candidate's shared object (not into the
// driver). The candidate's calls to the cudaMalloc family are redirected here when its object is linked
// (-Xlinker --wrap=cudaMalloc ...; only the candidate's own references are redirected). Every allocation that
// succeeds is filled with 0xFF bytes, a NaN pattern for every float type, so a candidate that reads memory it
// never wrote (a previous call's results left in a recycled allocation) fails whichever call is checked. The
// candidate's code runs only inside the driver's calls to kb_forward (`run`, `batch`, `time`, `profile`),
// so this is the same in verification and timing, and the memset is charged to the call that allocates, as
// the allocation is.
//
// Pinned host buffers (cudaMallocHost, cudaHostAlloc; mapped ones are device-readable) are poisoned the same
// way on the host. Memory a CUDA graph's allocation node would take is not: that call is not allowed.
//
// There is no switch: poisoning used to follow a flag the driver exported and set around its calls, and
// code in the candidate's process could find that flag (through these wrappers' own global offset table)
// and clear it. What remains in the candidate's reach is this code itself (its machine code can be patched
// or the real allocator reached by address), which no check inside the process can rule out.
#include <cstring>

#include <cuda_runtime.h>

extern "C" {
cudaError_t __real_cudaMalloc(void** ptr, size_t size);
cudaError_t __real_cudaMallocAsync(void** ptr, size_t size, cudaStream_t stream);
cudaError_t __real_cudaMallocFromPoolAsync(void** ptr, size_t size, cudaMemPool_t pool, cudaStream_t stream);
cudaError_t __real_cudaMallocPitch(void** ptr, size_t* pitch, size_t width, size_t height);
cudaError_t __real_cudaMallocHost(void** ptr, size_t size);
cudaError_t __real_cudaHostAlloc(void** ptr, size_t size, unsigned int flags);
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
  if (err != cudaSuccess || size == 0) return err;
  return poison_now(*ptr, size);
}

extern "C" cudaError_t __wrap_cudaMallocPitch(void** ptr, size_t* pitch, size_t width, size_t height) {
  cudaError_t err = __real_cudaMallocPitch(ptr, pitch, width, height);
  if (err != cudaSuccess || *pitch * height == 0) return err;
  return poison_now(*ptr, *pitch * height);
}

// Stream-ordered allocations are poisoned in stream order, before anything the candidate enqueues next.
extern "C" cudaError_t __wrap_cudaMallocAsync(void** ptr, size_t size, cudaStream_t stream) {
  cudaError_t err = __real_cudaMallocAsync(ptr, size, stream);
  if (err != cudaSuccess || size == 0) return err;
  return cudaMemsetAsync(*ptr, kPoisonByte, size, stream);
}

extern "C" cudaError_t __wrap_cudaMallocFromPoolAsync(void** ptr, size_t size, cudaMemPool_t pool,
                                                      cudaStream_t stream) {
  cudaError_t err = __real_cudaMallocFromPoolAsync(ptr, size, pool, stream);
  if (err != cudaSuccess || size == 0) return err;
  return cudaMemsetAsync(*ptr, kPoisonByte, size, stream);
}

extern "C" cudaError_t __wrap_cudaMallocHost(void** ptr, size_t size) {
  cudaError_t err = __real_cudaMallocHost(ptr, size);
  if (err == cudaSuccess && size != 0) std::memset(*ptr, kPoisonByte, size);
  return err;
}

extern "C" cudaError_t __wrap_cudaHostAlloc(void** ptr, size_t size, unsigned int flags) {
  cudaError_t err = __real_cudaHostAlloc(ptr, size, flags);
  if (err == cudaSuccess && size != 0) std::memset(*ptr, kPoisonByte, size);
  return err;
}
