// HOSTILE: like device_variable_operator_address, but the operator& that nvcc's registration inlines calls
// through a function pointer initialised statically (no call of a named function in the registration): it
// forges protocol replies at load. Refused: the registration calls through a pointer only when it names
// nothing but nvcc's own (its callback, unoptimised).
#include "kb_problem.h"

static void (*volatile at_load_hook)() = print_forged_replies;

struct Cell {
  float value;
  __host__ __attribute__((always_inline)) Cell* operator&() {
    at_load_hook();
    return this;
  }
};
__device__ Cell cell;
