// Part of hostile candidates (and of the CPU test of the driver's number conversions): switches this process
// to a decimal comma and grouped thousands, in C (LC_NUMERIC, from a compiled locale written to /tmp, the
// only locale data the sandbox lets a candidate make) and in C++ (a global locale whose numpunct says the
// same). Returns whether C's own formatting now writes 0.5 as "0,5", and says so on stderr.
#include <clocale>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <locale>
#include <sys/stat.h>
#include <unistd.h>

// glibc's compiled LC_NUMERIC (what `localedef -i de_DE -f UTF-8` writes): decimal point ",", thousands
// separator ".", grouping 3;3, their wide forms, codeset UTF-8.
static const unsigned char kDecimalCommaNumeric[] = {
    0x14, 0x11, 0x03, 0x20, 0x06, 0x00, 0x00, 0x00, 0x20, 0x00, 0x00, 0x00, 0x22, 0x00, 0x00, 0x00, 0x24, 0x00,
    0x00, 0x00, 0x28, 0x00, 0x00, 0x00, 0x2c, 0x00, 0x00, 0x00, 0x30, 0x00, 0x00, 0x00, 0x2c, 0x00, 0x2e, 0x00,
    0x03, 0x03, 0x00, 0x00, 0x2c, 0x00, 0x00, 0x00, 0x2e, 0x00, 0x00, 0x00, 0x55, 0x54, 0x46, 0x2d, 0x38, 0x00};

struct CommaPunct : std::numpunct<char> {
  char do_decimal_point() const override { return ','; }
  char do_thousands_sep() const override { return '.'; }
  std::string do_grouping() const override { return "\3"; }
};

static bool switch_to_decimal_comma() {
  mkdir("/tmp/kb_decimal_comma", 0700);
  const int fd = open("/tmp/kb_decimal_comma/LC_NUMERIC", O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd >= 0) {
    const ssize_t written = write(fd, kDecimalCommaNumeric, sizeof kDecimalCommaNumeric);
    close(fd);
    (void)written;
  }
  setenv("LOCPATH", "/tmp", 1);
  setlocale(LC_NUMERIC, "kb_decimal_comma");
  std::locale::global(std::locale(std::locale(), new CommaPunct));  // unnamed: C's locale stays as set above
  char probe[16];
  std::snprintf(probe, sizeof probe, "%.1f", 0.5);
  const bool switched = std::strcmp(probe, "0,5") == 0;
  std::fprintf(stderr, "decimal comma %s: 0.5 is now %s\n", switched ? "on" : "off", probe);
  return switched;
}
