// HOSTILE: defines __cxa_finalize, which crtbegin's destructor pass (linked into every shared library) calls
// when the library is unloaded or the process exits: code after the driver's last reply, with no fini array
// entry. Refused: a candidate may not define a name the trusted code linked into its library calls.
#include <cstdio>
#include "kb_problem.h"

extern "C" void __cxa_finalize(void*) { std::fprintf(stderr, "HOSTILE cxa_finalize_definition: ran at unload\n"); }
