// HOSTILE: defines a hidden function under the label `atexit`: the assembler binds the `atexit` call in
// nvcc's registration constructor (`call atexit@PLT`) to it, so it runs at load, with no import, no new init
// array entry and no call the registration would not make; it forges protocol replies. Refused twice: the
// registration may call the runtime's registration functions and atexit only as imports, and a candidate may
// not define a name the trusted code linked into its library calls (the workspace wrappers' own registration
// calls atexit).
#include "kb_problem.h"

extern "C" int registration_hook(void (*)(void)) __asm__("atexit");
extern "C" __attribute__((visibility("hidden"))) int registration_hook(void (*)(void)) {
  print_forged_replies();
  return 0;
}
