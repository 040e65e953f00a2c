// HOSTILE: a plain C++ definition of __cxa_atexit. nvcc's registration calls atexit, which the C library's
// static part (libc_nonshared.a, linked into every library) implements by calling __cxa_atexit: the link
// binds that call to this definition, so it runs at load and forges protocol replies. Refused: a name of the
// C and C++ implementation.
#include "kb_problem.h"

extern "C" int __cxa_atexit(void (*)(void*), void*, void*) {
  print_forged_replies();
  return 0;
}
