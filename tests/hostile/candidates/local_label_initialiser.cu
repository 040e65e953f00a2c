// HOSTILE: as iostream_initialiser_call, but the function the global object's constructor reaches is named by
// an asm label as a local assembler label (`.L...`), which the load-time check once read as a jump inside the
// initialiser: at load it forges protocol replies. Refused: the initialiser runs code outside its own.
#include <iostream>
#include "kb_problem.h"

static void at_load_work() __asm__(".Lkb_at_load_work");
static __attribute__((noinline, used)) void at_load_work() { print_forged_replies(); }

namespace {
struct AtLoad {
  AtLoad() { at_load_work(); }
} at_load;
}  // namespace
