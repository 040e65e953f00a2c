// HOSTILE: defines __stack_chk_fail, which every function the stack protector guards calls when its canary is
// overwritten (the harness compiles with -fstack-protector-strong): a kernel's launch stub, which nvcc's
// registration names, would then run the candidate's code. Refused: a launch stub may call the stack
// protector's import, not a definition of the candidate's under its name.
#include <cstdio>
#include "kb_problem.h"

extern "C" void __stack_chk_fail(void) { std::fprintf(stderr, "HOSTILE stack_chk_fail_definition: took the call\n"); }
