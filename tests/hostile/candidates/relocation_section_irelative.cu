// HOSTILE: data in a section named `.rela.text`: the assembler makes it a loaded relocation section, and the
// linker copies it into the library's dynamic relocations, which the loader applies. An IRELATIVE entry
// calls the function at its addend when the library loads (the offsets of this file built by nvcc 13.0 with
// GCC 12; for another layout, found by building once). Refused: the object may hold only code, data and
// constant sections (and the assembler's own, unloaded relocations).
#include <cstdio>
#include "kb_problem.h"

extern "C" void* at_load() {
  std::fprintf(stderr, "HOSTILE relocation_section_irelative: ran at load\n");
  return nullptr;
}
static void* slot;
extern "C" void* keep_slot() { return &slot; }

struct Rela {
  unsigned long offset, info, addend;
};
__attribute__((section(".rela.text"), used)) static const Rela injected[] = {{0x7090, 37, 0x1470}};

extern "C" int kb_forward(const KBTensor* inputs, const KBTensor*, KBTensor* outputs, cudaStream_t stream) {
  return keep_slot() == nullptr ? 1 : launch_swish(inputs, outputs, stream);
}
