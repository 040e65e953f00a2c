// HOSTILE: includes cuBLAS through a macro, in a run that does not allow cuBLAS. Refused by the source rules
// (include_path).
#include "kb_problem.h"
#define BLAS_HEADER <cublas_v2.h>
#include BLAS_HEADER

extern "C" int kb_forward(const KBTensor*, const KBTensor*, KBTensor*, cudaStream_t) { return 0; }
