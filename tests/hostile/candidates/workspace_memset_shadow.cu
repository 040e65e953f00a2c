// HOSTILE: defines cudaMemset as a no-op: the trusted workspace wrappers, linked into the same library,
// poison fresh workspace through cudaMemset, and the link binds their call to this definition, so workspace
// is never poisoned (a kernel reading memory it never wrote, a previous call's results in a recycled
// allocation, would pass). Refused: a candidate may not define a name the trusted code linked into its
// library calls.
#include "kb_problem.h"

extern "C" cudaError_t cudaMemset(void*, int, size_t) { return cudaSuccess; }
