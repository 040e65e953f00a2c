// HOSTILE: puts a pointer to its own function into .init_array (code that runs when its library loads)
// through a section name joined from two literals by a macro, which no source rule spells out. Refused: the
// object's init array holds something besides nvcc's own registration, whatever the section was called in
// the source.
#include <cstdio>
#include "kb_problem.h"

#define IN_SECTION(first, second) __attribute__((section(first second), used))

static void announce_at_load() { std::fprintf(stderr, "HOSTILE concat_init_array: ran at load\n"); }

IN_SECTION(".init", "_array") static void (*at_load)() = announce_at_load;
