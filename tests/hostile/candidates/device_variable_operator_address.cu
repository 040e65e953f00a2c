// HOSTILE: a __device__ variable whose type overloads unary &: nvcc's registration constructor (the one
// load-time function the object check lets through) takes the variable's address with `&`, so it calls the
// candidate's operator at load, which forges protocol replies. Refused: the host compiler's assembly shows
// the registration calling candidate code.
#include "kb_problem.h"

struct Cell {
  float value;
  __host__ Cell* operator&() {
    print_forged_replies();
    return this;
  }
};
__device__ Cell cell;
