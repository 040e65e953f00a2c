// HOSTILE: a constructor (attribute spelled through a macro) under the label of a translation unit's
// initialiser, `_GLOBAL__sub_I_...`, whose only relocations are <iostream>'s (__cxa_atexit, __dso_handle): the
// object check lets such an initialiser through. It calls a static function it shares its section with, a call
// the assembler resolves without a relocation, which forges protocol replies at load. Refused: the host
// compiler's assembly shows the initialiser calling it.
#include "kb_problem.h"

extern "C" void* __dso_handle;
extern "C" int __cxa_atexit(void (*)(void*), void*, void*);

#define AT_LOAD constructor
#define STARTUP section(".text.startup")
static __attribute__((noinline, STARTUP)) void at_load() { print_forged_replies(); }
static __attribute__((noinline, STARTUP)) void at_exit(void*) {}
extern "C" void named_initialiser() __asm__("_GLOBAL__sub_I_kb_candidate");
extern "C" __attribute__((AT_LOAD, STARTUP)) void named_initialiser() {
  __cxa_atexit(at_exit, nullptr, &__dso_handle);
  at_load();
}
