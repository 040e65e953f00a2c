// HOSTILE: defines __gmon_start__, the profiling hook the C runtime's _init (DT_INIT, in crti.o, linked into
// every shared library) calls when the library loads if the name resolves; the link binds it to this
// definition, so it runs at load with no init array entry, and forges protocol replies. Refused: a candidate
// may not define a name the trusted code linked into its library calls.
#include "kb_problem.h"

extern "C" void __gmon_start__() { print_forged_replies(); }
