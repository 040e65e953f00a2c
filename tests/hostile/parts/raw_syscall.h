// Part of hostile candidates: a raw x86-64 system call, its instruction spelled as bytes so that no source or
// symbol rule sees it, `say`, which writes a line to stderr with it, and `say_number`, a number so written.
static long sys(long nr, long a = 0, long b = 0, long c = 0, long d = 0, long e = 0) {
  long ret;
  asm volatile("mov %5, %%r10\n\tmov %6, %%r8\n\t.byte 0x0f, 0x05"
               : "=a"(ret)
               : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(d), "r"(e)
               : "rcx", "r11", "r10", "r8", "memory");
  return ret;
}

static long say(const char* text) {
  return sys(1, 2, reinterpret_cast<long>(text), static_cast<long>(__builtin_strlen(text)));
}

// `static inline`: most candidates that take this part never call it.
static inline void say_number(long value) {
  char text[24];
  int n = 0;
  do {
    text[sizeof text - 2 - n++] = static_cast<char>('0' + value % 10);
    value /= 10;
  } while (value > 0);
  text[sizeof text - 1] = 0;
  say(text + sizeof text - 1 - n);
}
