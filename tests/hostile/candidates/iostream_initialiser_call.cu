// HOSTILE: a global object whose constructor calls a static function, beside <iostream>: the compiler merges
// its construction into <iostream>'s initialiser (which the object check lets through), and a call to a local
// function of the same section carries no relocation, so the initialiser's relocations are <iostream>'s alone.
// At load it forges protocol replies. Refused: the host compiler's assembly shows the initialiser calling it.
#include <iostream>
#include "kb_problem.h"

namespace {
struct AtLoad {
  AtLoad() { print_forged_replies(); }
} at_load;
}  // namespace
