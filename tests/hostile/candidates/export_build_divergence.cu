// HOSTILE: correct wherever it is compiled as the harness compiles it; built by the exported package or the
// KernelBench file (torch.utils.cpp_extension, in the user's own process, no sandbox), it sees torch's build
// (the extension's name and API macros, relaxed constexpr, C++20 by default, no stack-protector macro) and
// writes zeros instead. The export's nvcc flags now undo what torch adds and repeat the harness's own, so both
// builds see the same macros. (What the build cannot undo — torch's include folders on the path, the file's
// name, the time — is described in the red-team report, not closed here.)
#include "kb_problem.h"

#if defined(TORCH_EXTENSION_NAME) || defined(TORCH_API_INCLUDE_EXTENSION_H) || \
    defined(__CUDACC_RELAXED_CONSTEXPR__) || __cplusplus > 201703L || !defined(__SSP_STRONG__)
#define KB_SEES_ANOTHER_BUILD 1
#else
#define KB_SEES_ANOTHER_BUILD 0
#endif

extern "C" int kb_forward(const KBTensor* inputs, const KBTensor*, KBTensor* outputs, cudaStream_t stream) {
  if (KB_SEES_ANOTHER_BUILD)
    return cudaMemsetAsync(outputs[KB_OUT_OUT].data, 0, KB_OUT_OUT_NUMEL * sizeof(float), stream) == cudaSuccess ? 0 : 1;
  return launch_swish(inputs, outputs, stream);
}
