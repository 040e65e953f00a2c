// HOSTILE: when the driver loads, points stdout's FILE at every descriptor in turn (stdout->_fileno) and
// prints forged protocol replies, the driver's ready line and a timing reply of 0.001 ms per call among
// them, so they land in the protocol whatever descriptor it uses. Replies before their request are
// forgeries: the verdict is forged_result.
#include <cstdio>
#include "kb_problem.h"

namespace {
struct AtLoad {
  AtLoad() { print_forged_replies(); }  // tests/hostile/parts/forged_replies.h: stdout->_fileno on each descriptor
} at_load;
}  // namespace
