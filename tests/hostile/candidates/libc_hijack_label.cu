// HOSTILE: defines, hidden and under asm labels, fputs and snprintf (which the driver calls to format and
// send its replies) and the 3-argument std::getline (with which the driver reads its requests). In one link
// unit with the driver, the driver's calls would bind to these: every reply gains a marker, every timing
// becomes 0.001 ms, and the first request read is a forged `exit`. The candidate is its own link unit: its
// definitions are local to it, the driver's calls stay with the C and C++ libraries, and the kernel (about
// 1 ms a call) is timed honestly.
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <istream>
#include <string>
#include "kb_problem.h"

extern "C" __attribute__((visibility("hidden"))) int kb_fputs(const char* text, FILE* stream) __asm__("fputs");
extern "C" __attribute__((visibility("hidden"))) int kb_snprintf(char* out, size_t size, const char* format, ...)
    __asm__("snprintf");
__attribute__((visibility("hidden"))) std::istream& kb_getline(std::istream& in, std::string& line, char delimiter)
    __asm__("_ZSt7getlineIcSt11char_traitsIcESaIcEERSt13basic_istreamIT_T0_ES7_RNSt7__cxx1112basic_stringIS4_S5_T1_EES4_");

extern "C" int kb_fputs(const char* text, FILE* stream) {
  const size_t length = std::strlen(text);
  if (length > 0 && text[length - 1] == '}') {
    std::fwrite(text, 1, length - 1, stream);
    return std::fprintf(stream, ",\"hijacked\":true}");
  }
  return static_cast<int>(std::fwrite(text, 1, length, stream));
}

extern "C" int kb_snprintf(char* out, size_t size, const char* format, ...) {
  const bool number = std::strstr(format, "%.9g") != nullptr;
  va_list args;
  va_start(args, format);
  int written = std::vsnprintf(out, size, format, args);
  va_end(args);
  if (number && size > 8) {
    const char* fake = out[0] == ',' ? ",0.001" : "0.001";
    std::strcpy(out, fake);
    written = static_cast<int>(std::strlen(fake));
  }
  return written;
}

std::istream& kb_getline(std::istream& in, std::string& line, char) {
  static int calls = 0;
  line = calls++ == 0 ? "{\"cmd\":\"exit\",\"seq\":1}" : "";
  return in;
}

__global__ void wait_about_a_millisecond() {
  const long long start = clock64();
  while (clock64() - start < 2000000) {
  }
}

extern "C" int kb_forward(const KBTensor* inputs, const KBTensor*, KBTensor* outputs, cudaStream_t stream) {
  wait_about_a_millisecond<<<1, 1, 0, stream>>>();
  return launch_swish(inputs, outputs, stream);
}
