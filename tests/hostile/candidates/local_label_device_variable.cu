// HOSTILE: a __device__ variable whose type's unary & (inlined into nvcc's registration, which takes the
// variable's address) calls a function named as a local assembler label (`.L...`), hidden from the check of
// what the registration runs: at load it forges protocol replies. Refused: the registration runs code outside
// its own.
#include "kb_problem.h"

static void at_load_work() __asm__(".Lkb_registration_work");
static __attribute__((noinline, used)) void at_load_work() { print_forged_replies(); }

struct Cell {
  float value;
  __host__ __attribute__((always_inline)) Cell* operator&() {
    at_load_work();
    return this;
  }
};
__device__ Cell cell;
