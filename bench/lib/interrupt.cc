#include "bench/lib/interrupt.h"

#include <csignal>

namespace bench {

// Only sets the flag: nothing else is async-signal-safe here.
extern "C" {
static void on_signal(int) { g_interrupted.store(true); }
}

void install_interrupt_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);
}

}  // namespace bench
