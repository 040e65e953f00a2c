// HOSTILE: when the driver loads, opens connections with raw system calls: TCP to a port the test listens
// on at 127.0.0.1:47831, an abstract Unix socket the test listens on (@kernelblaster-hostile), and UDP to
// a documentation address. The sandbox's network namespace is empty: nothing connects.
#include "kb_problem.h"

struct Inet {
  unsigned short family, port;
  unsigned char address[4], zero[8];
};
struct Local {
  unsigned short family;
  char path[108];
};

namespace {
struct AtLoad {
  AtLoad() {
    Inet local_tcp = {2, __builtin_bswap16(47831), {127, 0, 0, 1}, {}};
    long tcp = sys(41, 2, 1, 0);  // socket(AF_INET, SOCK_STREAM)
    long connected = sys(42, tcp, reinterpret_cast<long>(&local_tcp), sizeof local_tcp);
    if (connected == 0) sys(1, tcp, reinterpret_cast<long>("escaped\n"), 8);
    Local abstract = {1, "\0kernelblaster-hostile"};
    long unix_socket = sys(41, 1, 1, 0);  // socket(AF_UNIX, SOCK_STREAM)
    long reached = sys(42, unix_socket, reinterpret_cast<long>(&abstract), 2 + 1 + 21);
    if (reached == 0) sys(1, unix_socket, reinterpret_cast<long>("escaped\n"), 8);
    Inet outside = {2, __builtin_bswap16(53), {192, 0, 2, 1}, {}};
    long udp = sys(41, 2, 2, 0);  // socket(AF_INET, SOCK_DGRAM)
    long sent = sys(44, udp, reinterpret_cast<long>("escaped"), 7, 0, reinterpret_cast<long>(&outside));
    say(connected == 0 || reached == 0 || sent > 0 ? "HOSTILE network reached\n" : "HOSTILE network: nothing\n");
  }
} at_load;
}  // namespace
