// HOSTILE: changes the process's locale by name, with nothing else the rules refuse: setlocale(LC_NUMERIC)
// and std::locale::global with a numpunct whose decimal point is a comma (what a driver that formatted or
// parsed numbers through C or C++ locales would pick up). Refused: neither is a listed import (the object
// check names both); without the rules, locale_decimal_comma shows the driver's numbers are unaffected.
#include <clocale>
#include <locale>
#include "kb_problem.h"

struct CommaPunct : std::numpunct<char> {
  char do_decimal_point() const override { return ','; }
};

extern "C" int kb_forward(const KBTensor* inputs, const KBTensor*, KBTensor* outputs, cudaStream_t stream) {
  setlocale(LC_NUMERIC, "C.UTF-8");
  std::locale::global(std::locale(std::locale(), new CommaPunct));
  return launch_swish(inputs, outputs, stream);
}
