// HOSTILE: a system call (getpid) with no asm at all: the instruction bytes are a constant array placed in
// .text (executable) by a section attribute whose name is plain, and kb_forward calls the array. Refused: no
// data object may live in a code section.
#include "kb_problem.h"

__attribute__((section(".text"), used)) static const unsigned char getpid_code[] = {
    0xb8, 0x27, 0x00, 0x00, 0x00,  // mov $39, %eax
    0x0f, 0x05,                    // syscall
    0xc3};                         // ret

extern "C" int kb_forward(const KBTensor* inputs, const KBTensor*, KBTensor* outputs, cudaStream_t stream) {
  const auto getpid = reinterpret_cast<long (*)()>(reinterpret_cast<const void*>(getpid_code));
  return getpid() <= 0 ? 1 : launch_swish(inputs, outputs, stream);
}
