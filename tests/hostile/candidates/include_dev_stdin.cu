// HOSTILE: includes /dev/stdin, which blocks the compiler on the harness's standard input.
// Refused by the source rules (outside_file); the compile sandbox has neither the harness's stdin nor /dev/stdin.
#include "kb_problem.h"
#include "/dev/stdin"

extern "C" int kb_forward(const KBTensor*, const KBTensor*, KBTensor*, cudaStream_t) { return 0; }
