// HOSTILE: sends terminal commands through the harness's report: prints an escape sequence that sets the
// terminal's title on stderr, then throws an exception whose text sets the clipboard (OSC 52). Both reached the
// crash's summary as they were, so `kernelblaster eval` printed them to the operator's terminal. They are now
// written as `\x1b` escapes: crash, with the sequences shown, not obeyed.
#include <cstdio>
#include <stdexcept>
#include "kb_problem.h"

extern "C" int kb_forward(const KBTensor*, const KBTensor*, KBTensor*, cudaStream_t) {
  std::fprintf(stderr, "\x1b]0;kernelblaster owned\x07\n");
  std::fflush(stderr);
  throw std::runtime_error("\x1b]52;c;b3duZWQ=\x07");
}
