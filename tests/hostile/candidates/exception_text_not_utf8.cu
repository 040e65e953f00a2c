// HOSTILE: throws from kb_forward an exception whose text holds a 0xFF byte. The driver quotes it byte for byte in
// its error reply, which the harness's JSON reader could not decode: it took the driver's genuine reply for a
// line of other output and waited for a reply until the call's timeout (the verdict `timeout`, a hang of the
// trusted side for as long). Replies are now read as UTF-8 with such bytes replaced: crash at once, naming the
// exception.
#include <stdexcept>
#include "kb_problem.h"

extern "C" int kb_forward(const KBTensor*, const KBTensor*, KBTensor*, cudaStream_t) {
  throw std::runtime_error("\xff");
}
