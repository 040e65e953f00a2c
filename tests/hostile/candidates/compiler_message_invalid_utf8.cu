// HOSTILE: makes the compiler print bytes that are not UTF-8: `#pragma message` with a "\xff" escape, which
// cudafe++ prints as the raw byte 0xFF. The harness read nvcc's output as strict UTF-8 and failed with a
// UnicodeDecodeError in its own process while building: a traceback, not a verdict. The output is now read with
// undecodable bytes replaced: the candidate builds (a remark is no error) and gets its verdict.
#include "kb_problem.h"

#pragma message("not UTF-8: \xff")
