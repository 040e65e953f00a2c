// HOSTILE: throws from kb_forward an exception whose text holds the bytes ED A0 80 (a lone surrogate, U+D800,
// as UTF-8 would spell it). The driver quotes that text byte for byte in its error reply, and the harness's JSON
// reader turned those bytes into a lone surrogate: the verdict's summary held a string no result can be written
// with, and printing or saving the result failed in the trusted process. Replies are now read as UTF-8 with such
// bytes replaced: crash, naming the exception.
#include <stdexcept>
#include "kb_problem.h"

extern "C" int kb_forward(const KBTensor*, const KBTensor*, KBTensor*, cudaStream_t) {
  throw std::runtime_error("\xed\xa0\x80");
}
